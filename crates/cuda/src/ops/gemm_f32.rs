//! `kernels/gemm_f32.cu`: f32 weights times f32 activations, for float matrices.
//!
//! Contract: each output is one f32 FMA chain over the columns in order (any tile shape gives
//! the same bits); against the CPU's float matmul, whose SIMD dot keeps several lanes, only the
//! summation order differs (`cuda-parity`).

use super::{int, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::GEMM_F32;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use ferrolm_gguf::GgmlType;
use std::sync::Arc;

/// The kernel's block (GEMM_T × GEMM_T threads) and tile (GEMM_BM rows × GEMM_BN tokens).
const THREADS_XY: u32 = 16;
const BLOCK_ROWS: usize = 64;
const BLOCK_TOKENS: usize = 64;

pub struct GemmF32 {
    stream: Arc<CudaStream>,
    gemm: CudaFunction,
}

impl GemmF32 {
    pub fn load(dev: &CudaDevice) -> Result<Self> {
        Ok(Self {
            stream: dev.stream().clone(),
            gemm: dev.function(&GEMM_F32, "gemm_f32")?,
        })
    }

    /// `out[t][r] = x[t] · w[r]` for an F32 matrix `w` and `n` rows of `x`.
    pub fn matmul(
        &self,
        w: &QuantMatrix,
        x: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        assert_eq!(w.ty, GgmlType::F32, "gemm_f32: weights must be F32");
        assert!(x.len() >= n * w.cols, "gemm_f32: x too small");
        assert!(out.len() >= n * w.rows, "gemm_f32: out too small");
        if n == 0 || w.rows == 0 {
            return Ok(());
        }
        let (cols, rows, ntok) = (
            int(w.cols, "gemm cols"),
            int(w.rows, "gemm rows"),
            int(n, "gemm tokens"),
        );
        let cfg = LaunchConfig {
            grid_dim: (
                w.rows.div_ceil(BLOCK_ROWS) as u32,
                n.div_ceil(BLOCK_TOKENS) as u32,
                1,
            ),
            block_dim: (THREADS_XY, THREADS_XY, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.gemm);
        b.arg(&w.data)
            .arg(x)
            .arg(out)
            .arg(&cols)
            .arg(&rows)
            .arg(&ntok);
        // SAFETY: gemm_f32(w, x, dst, ncols, nrows, ntok): w holds rows*cols floats (checked at
        // upload), x n*cols, dst n*rows (asserted above).
        unsafe { b.launch(cfg) }.during("launching gemm_f32")?;
        Ok(())
    }
}
