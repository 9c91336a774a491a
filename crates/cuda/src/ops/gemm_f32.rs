//! `kernels/gemm_f32.cu`: f32 weights times f32 activations, for float matrices.
//!
//! Contract: each output is one f32 FMA chain over the columns in order (any tile shape gives
//! the same bits); against the CPU's float matmul, whose SIMD dot keeps several lanes, only the
//! summation order differs (`cuda-parity`).

use super::launch::Launcher;
use super::{int, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::GEMM_F32;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, DeviceRepr, LaunchConfig};
use ferrolm_gguf::GgmlType;

/// The kernels' block (GEMM_T × GEMM_T threads), rows a block (GEMM_BM), and tokens a block
/// of `gemm_f32` and `gemm_f32_narrow`.
const THREADS_XY: u32 = 16;
const BLOCK_ROWS: usize = 64;
const BLOCK_TOKENS: usize = 64;
const NARROW_TOKENS: usize = 16;

pub struct GemmF32 {
    launch: Launcher,
    gemm: CudaFunction,
    narrow: CudaFunction,
    sms: usize,
}

impl GemmF32 {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let sms = dev
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .during("reading the SM count")? as usize;
        Ok(Self {
            launch: launch.clone(),
            gemm: dev.function(&GEMM_F32, "gemm_f32")?,
            narrow: dev.function(&GEMM_F32, "gemm_f32_narrow")?,
            sms,
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
        self.matmul_raw(&w.data, w.rows, w.cols, x, n, out)
    }

    /// The same for f32 weights `w` of `rows` × `cols` held as floats (the MoE router).
    pub fn matmul_raw<T: DeviceRepr>(
        &self,
        w: &CudaSlice<T>,
        rows: usize,
        cols: usize,
        x: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        assert!(
            w.len() * size_of::<T>() >= rows * cols * 4,
            "gemm_f32: w too small"
        );
        assert!(x.len() >= n * cols, "gemm_f32: x too small");
        assert!(out.len() >= n * rows, "gemm_f32: out too small");
        if n == 0 || rows == 0 {
            return Ok(());
        }
        // The wide tile unless it leaves SMs idle.
        let wide_blocks = rows.div_ceil(BLOCK_ROWS) * n.div_ceil(BLOCK_TOKENS);
        let (f, tokens) = if wide_blocks >= 2 * self.sms {
            (&self.gemm, BLOCK_TOKENS)
        } else {
            (&self.narrow, NARROW_TOKENS)
        };
        let cfg = LaunchConfig {
            grid_dim: (
                int(rows.div_ceil(BLOCK_ROWS), "gemm row tiles") as u32,
                int(n.div_ceil(tokens), "gemm token tiles") as u32,
                1,
            ),
            block_dim: (THREADS_XY, THREADS_XY, 1),
            shared_mem_bytes: 0,
        };
        let (cols, rows, ntok) = (
            int(cols, "gemm cols"),
            int(rows, "gemm rows"),
            int(n, "gemm tokens"),
        );
        let mut b = self.launch.builder(f);
        b.arg(w).arg(x).arg(out).arg(&cols).arg(&rows).arg(&ntok);
        // SAFETY: gemm_f32{,_narrow}(w, x, dst, ncols, nrows, ntok): w holds rows*cols floats,
        // x n*cols, dst n*rows (asserted above); the grid covers every (row, token) tile.
        unsafe { b.launch(cfg) }.during("launching gemm_f32")?;
        Ok(())
    }
}
