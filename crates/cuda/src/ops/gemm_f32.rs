//! `kernels/gemm_f32.cu`: f32 weights times f32 activations, for float matrices.
//!
//! Contract: each output is the CPU's f32 dot bit for bit (`dot_f32_avx512_order`, the order of
//! its AVX-512 dot; `cuda-parity` compares every output's bits), whatever the shape.

use super::launch::Launcher;
use super::{int, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::GEMM_F32;
use cudarc::driver::{CudaFunction, CudaSlice, DeviceRepr, LaunchConfig};
use ferrolm_gguf::GgmlType;

/// The kernel's warps along the rows a block (GEMM_WARPS), rows a block (GEMM_WARPS ·
/// GEMM_ROWS), tokens a warp (GEMM_TOKENS), and the most warps along the tokens a block
/// (GEMM_TOKEN_WARPS_MAX).
const WARPS: u32 = 4;
const BLOCK_ROWS: usize = 16;
const WARP_TOKENS: usize = 8;
const TOKEN_WARPS_MAX: usize = 4;
/// The kernel's ring of shared-memory stages (GEMM_STAGES), each the tile's weight and token
/// rows of 64 floats.
const STAGES: usize = 3;

/// Dynamic shared memory of a block with `token_warps` warps along the tokens.
fn ring_bytes(token_warps: usize) -> u32 {
    (STAGES * (BLOCK_ROWS + WARP_TOKENS * token_warps) * 64 * 4) as u32
}

pub struct GemmF32 {
    launch: Launcher,
    gemm: CudaFunction,
}

impl GemmF32 {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        Ok(Self {
            launch: launch.clone(),
            gemm: dev.function(&GEMM_F32, "gemm_f32")?,
        })
    }

    /// `out[t][r] = x[t] · w[r]` for an F32 matrix `w` and `n` rows of `x`, the block's warps
    /// `token_warps` (1-4, `Plan::gemm_f32_token_warps`) along the tokens: the same bits
    /// whatever it is.
    pub fn matmul(
        &self,
        w: &QuantMatrix,
        x: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<f32>,
        token_warps: usize,
    ) -> Result<()> {
        assert_eq!(w.ty, GgmlType::F32, "gemm_f32: weights must be F32");
        self.matmul_raw(&w.data, w.rows, w.cols, x, n, out, token_warps)
    }

    /// The same for f32 weights `w` of `rows` × `cols` held as floats (the MoE router).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_raw<T: DeviceRepr>(
        &self,
        w: &CudaSlice<T>,
        rows: usize,
        cols: usize,
        x: &CudaSlice<f32>,
        n: usize,
        out: &mut CudaSlice<f32>,
        token_warps: usize,
    ) -> Result<()> {
        assert!(
            (1..=TOKEN_WARPS_MAX).contains(&token_warps),
            "gemm_f32: {token_warps} token warps"
        );
        assert!(
            w.len() * size_of::<T>() >= rows * cols * 4,
            "gemm_f32: w too small"
        );
        assert!(x.len() >= n * cols, "gemm_f32: x too small");
        assert!(out.len() >= n * rows, "gemm_f32: out too small");
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (
                int(rows.div_ceil(BLOCK_ROWS), "gemm row tiles") as u32,
                int(n.div_ceil(WARP_TOKENS * token_warps), "gemm token tiles") as u32,
                1,
            ),
            block_dim: (32, WARPS * token_warps as u32, 1),
            shared_mem_bytes: ring_bytes(token_warps),
        };
        let (cols, rows, ntok) = (
            int(cols, "gemm cols"),
            int(rows, "gemm rows"),
            int(n, "gemm tokens"),
        );
        let mut b = self.launch.builder(&self.gemm);
        b.arg(w).arg(x).arg(out).arg(&cols).arg(&rows).arg(&ntok);
        // SAFETY: gemm_f32(w, x, dst, ncols, nrows, ntok): w holds rows*cols floats,
        // x n*cols, dst n*rows (asserted above); the grid covers every (row, token) tile with
        // blocks of WARPS x token_warps <= GEMM_TOKEN_WARPS_MAX warps (the launch bound) and
        // the ring's dynamic shared memory for them (at most 36 KiB: no opt-in).
        unsafe { b.launch(cfg) }.during("launching gemm_f32")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launch's shape is the kernel's.
    #[test]
    fn launch_matches_the_kernel() {
        let src = GEMM_F32.source;
        let def = |name: &str, v: usize| assert!(src.contains(&format!("#define {name} {v}\n")));
        def("GEMM_WARPS", WARPS as usize);
        def("GEMM_TOKENS", WARP_TOKENS);
        def("GEMM_TOKEN_WARPS_MAX", TOKEN_WARPS_MAX);
        def("GEMM_STAGES", STAGES);
        assert!(ring_bytes(TOKEN_WARPS_MAX) <= 48 * 1024);
        def("GEMM_ROWS", BLOCK_ROWS / WARPS as usize);
    }
}
