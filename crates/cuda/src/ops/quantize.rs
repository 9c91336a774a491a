//! `kernels/quantize.cu`: f32 rows to Q8_1 blocks (the activations of mmvq).

use super::int;
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::QUANTIZE;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Bytes of one 32-element Q8_1 block: f16 d, f16 s, 32 codes.
pub const Q8_1_BLOCK_BYTES: usize = 36;
const THREADS: u32 = 256;

pub struct Quantize {
    stream: Arc<CudaStream>,
    q8_1: CudaFunction,
}

impl Quantize {
    pub fn load(dev: &CudaDevice) -> Result<Self> {
        Ok(Self {
            stream: dev.stream().clone(),
            q8_1: dev.function(&QUANTIZE, "quantize_q8_1")?,
        })
    }

    /// Bytes of Q8_1 for `n` rows of `cols` elements.
    pub fn q8_1_bytes(n: usize, cols: usize) -> usize {
        n * cols / 32 * Q8_1_BLOCK_BYTES
    }

    /// Quantizes `x` (rows of `cols` floats, `cols` a multiple of 32) into `out`.
    pub fn q8_1(&self, x: &CudaSlice<f32>, cols: usize, out: &mut CudaSlice<u8>) -> Result<()> {
        assert!(
            cols.is_multiple_of(32) && x.len().is_multiple_of(cols),
            "q8_1: shape"
        );
        self.q8_1_rows(x, x.len() / cols, cols, out)
    }

    /// Quantizes the first `rows` rows of `x` (`cols` floats each, a multiple of 32): for
    /// scratch buffers sized for more rows than one call fills.
    pub fn q8_1_rows(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        cols: usize,
        out: &mut CudaSlice<u8>,
    ) -> Result<()> {
        assert!(
            cols.is_multiple_of(32) && x.len() >= rows * cols,
            "q8_1: shape"
        );
        assert!(
            out.len() >= Self::q8_1_bytes(rows, cols),
            "q8_1: out too small"
        );
        if rows == 0 {
            return Ok(());
        }
        let c = int(cols, "q8_1 cols");
        let cfg = LaunchConfig {
            grid_dim: (cols.div_ceil(THREADS as usize) as u32, rows as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.q8_1);
        b.arg(x).arg(out).arg(&c);
        // SAFETY: quantize_q8_1(x, y, cols): rows x cols floats in, rows x cols/32 blocks out.
        unsafe { b.launch(cfg) }.during("launching quantize_q8_1")?;
        Ok(())
    }
}
