//! `kernels/quantize.cu`: f32 rows to the activation blocks of the int8 kernels.
//!
//! The blocks have ggml's Q8_1 layout (32 codes a block) with an f32 scale and no sum. They are
//! quantized the way llama.cpp's CPU quantizes activations for the weight they meet (the
//! plan's `act_quant`): K-quant weights get Q8_K's codes and one scale per 256 values, the
//! others Q8_1's. With `FERROLM_CUDA_Q8K=0` every activation is Q8_1, for bisecting.

use super::int;
use super::launch::Launcher;
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::QUANTIZE;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};

/// Bytes of one 32-code activation block: f32 d, 32 codes.
pub const Q8_1_BLOCK_BYTES: usize = 36;
const THREADS: u32 = 256;

/// How a row of activations is quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActQuant {
    /// ggml's Q8_1: d = absmax / 127 per 32 values (f16-rounded), codes rounded half away.
    Q8_1,
    /// ggml's Q8_K: one scale per 256 values, codes rounded half to even.
    Q8K,
}

/// The values of activation blocks read back from the device (for parity checks).
pub fn dequantize_blocks(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(Q8_1_BLOCK_BYTES)
        .flat_map(|b| {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            b[4..].iter().map(move |&q| d * f32::from(q as i8))
        })
        .collect()
}

pub struct Quantize {
    launch: Launcher,
    q8_1: CudaFunction,
    q8_k: CudaFunction,
}

impl Quantize {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        Ok(Self {
            launch: launch.clone(),
            q8_1: dev.function(&QUANTIZE, "quantize_q8_1")?,
            q8_k: dev.function(&QUANTIZE, "quantize_q8_k")?,
        })
    }

    /// Bytes of activation blocks for `n` rows of `cols` elements.
    pub fn q8_1_bytes(n: usize, cols: usize) -> usize {
        n * cols / 32 * Q8_1_BLOCK_BYTES
    }

    /// Quantizes `x` (rows of `cols` floats, `cols` a multiple of 32) as Q8_1 into `out`.
    pub fn q8_1(&self, x: &CudaSlice<f32>, cols: usize, out: &mut CudaSlice<u8>) -> Result<()> {
        assert!(
            cols.is_multiple_of(32) && x.len().is_multiple_of(cols),
            "q8_1: shape"
        );
        self.rows(x, x.len() / cols, cols, ActQuant::Q8_1, out)
    }

    /// Quantizes the first `rows` rows of `x` (`cols` floats each, a multiple of 32; of 256
    /// for Q8_K): for scratch buffers sized for more rows than one call fills.
    pub fn rows(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        cols: usize,
        mode: ActQuant,
        out: &mut CudaSlice<u8>,
    ) -> Result<()> {
        let group = if mode == ActQuant::Q8K { 256 } else { 32 };
        assert!(
            cols.is_multiple_of(group) && x.len() >= rows * cols,
            "quantize: shape"
        );
        assert!(
            out.len() >= Self::q8_1_bytes(rows, cols),
            "quantize: out too small"
        );
        if rows == 0 {
            return Ok(());
        }
        let c = int(cols, "quantize cols");
        // Q8_1: a thread per value; Q8_K: a warp per 256 values.
        let (f, threads_needed) = match mode {
            ActQuant::Q8_1 => (&self.q8_1, cols),
            ActQuant::Q8K => (&self.q8_k, cols / 256 * 32),
        };
        let cfg = LaunchConfig {
            grid_dim: (
                threads_needed.div_ceil(THREADS as usize) as u32,
                rows as u32,
                1,
            ),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.launch.builder(f);
        b.arg(x).arg(out).arg(&c);
        // SAFETY: quantize_q8_{1,k}(x, y, cols): rows x cols floats in, rows x cols/32 blocks
        // out, the grid as each kernel's comment asks.
        unsafe { b.launch(cfg) }.during("launching the activation quantizer")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::dequantize_blocks;

    #[test]
    fn blocks_read_back() {
        let mut b = 0.5f32.to_le_bytes().to_vec();
        b.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let v = dequantize_blocks(&b);
        assert_eq!(v.len(), 32);
        assert_eq!((v[0], v[16], v[31]), (-8.0, 0.0, 7.5));
    }
}
