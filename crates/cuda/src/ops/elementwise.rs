//! `kernels/elementwise.cu`: add, add_bias, swiglu, geglu, scale and strided column copies on
//! f32 buffers; the Hadamard rotation of a quantized KV cache.

use super::launch::Launcher;
use super::{int, stride_blocks};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::ELEMENTWISE;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};

const THREADS: u32 = 256;
/// `greedy_rows_f32`'s block (its `GREEDY_THREADS`: its shared partials are sized for it).
const GREEDY_THREADS: u32 = 256;

pub struct Elementwise {
    launch: Launcher,
    add: CudaFunction,
    add_bias: CudaFunction,
    swiglu: CudaFunction,
    geglu: CudaFunction,
    scale: CudaFunction,
    copy_cols: CudaFunction,
    hadamard: CudaFunction,
    round_q8_0: CudaFunction,
    greedy_rows: CudaFunction,
}

fn cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (stride_blocks(n, THREADS), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Elementwise {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        Ok(Self {
            launch: launch.clone(),
            add: dev.function(&ELEMENTWISE, "add_f32")?,
            add_bias: dev.function(&ELEMENTWISE, "add_bias_f32")?,
            swiglu: dev.function(&ELEMENTWISE, "swiglu_f32")?,
            geglu: dev.function(&ELEMENTWISE, "geglu_f32")?,
            scale: dev.function(&ELEMENTWISE, "scale_f32")?,
            copy_cols: dev.function(&ELEMENTWISE, "copy_cols_f32")?,
            hadamard: dev.function(&ELEMENTWISE, "hadamard_f32")?,
            round_q8_0: dev.function(&ELEMENTWISE, "round_q8_0_f32")?,
            greedy_rows: dev.function(&ELEMENTWISE, "greedy_rows_f32")?,
        })
    }

    /// `acc += x`.
    pub fn add(&self, acc: &mut CudaSlice<f32>, x: &CudaSlice<f32>) -> Result<()> {
        assert_eq!(acc.len(), x.len(), "add: lengths differ");
        let n = int(acc.len(), "add length");
        let mut b = self.launch.builder(&self.add);
        b.arg(acc).arg(x).arg(&n);
        // SAFETY: add_f32(float*, const float*, int) over n elements of both buffers.
        unsafe { b.launch(cfg(n as usize)) }.during("launching add_f32")?;
        Ok(())
    }

    /// `x[t] += bias` for every row `t` of `bias.len()` elements.
    pub fn add_bias(&self, x: &mut CudaSlice<f32>, bias: &CudaSlice<f32>) -> Result<()> {
        assert!(
            x.len().is_multiple_of(bias.len()),
            "add_bias: not whole rows"
        );
        let (n, width) = (
            int(x.len(), "add_bias length"),
            int(bias.len(), "bias width"),
        );
        let mut b = self.launch.builder(&self.add_bias);
        b.arg(x).arg(bias).arg(&n).arg(&width);
        // SAFETY: add_bias_f32(float*, const float*, int n, int width); bias has width floats.
        unsafe { b.launch(cfg(n as usize)) }.during("launching add_bias_f32")?;
        Ok(())
    }

    /// `gate = silu(gate) * up`.
    pub fn swiglu(&self, gate: &mut CudaSlice<f32>, up: &CudaSlice<f32>) -> Result<()> {
        self.swiglu_into(gate, up, None)
    }

    /// [`Self::swiglu`], and with `gate16` the result rounded to f16 there too (bit-identical to
    /// `GemmWgmma::round_f16` of it), for the f16 product after it.
    pub fn swiglu_into(
        &self,
        gate: &mut CudaSlice<f32>,
        up: &CudaSlice<f32>,
        gate16: Option<&mut CudaSlice<u16>>,
    ) -> Result<()> {
        assert_eq!(gate.len(), up.len(), "swiglu: lengths differ");
        assert!(
            gate16.as_ref().is_none_or(|h| h.len() >= gate.len()),
            "swiglu: gate16 too small"
        );
        let n = int(gate.len(), "swiglu length");
        let null = 0u64;
        let mut b = self.launch.builder(&self.swiglu);
        b.arg(gate).arg(up).arg(&n);
        match gate16 {
            Some(h) => b.arg(h),
            None => b.arg(&null),
        };
        // SAFETY: swiglu_f32(float*, const float*, int, u16*|null) over n elements of the
        // buffers (gate16's length asserted above).
        unsafe { b.launch(cfg(n as usize)) }.during("launching swiglu_f32")?;
        Ok(())
    }

    /// `gate = gelu(gate) * up`, GELU's tanh form (the CPU's `norm::geglu`).
    pub fn geglu(&self, gate: &mut CudaSlice<f32>, up: &CudaSlice<f32>) -> Result<()> {
        assert_eq!(gate.len(), up.len(), "geglu: lengths differ");
        let n = int(gate.len(), "geglu length");
        let mut b = self.launch.builder(&self.geglu);
        b.arg(gate).arg(up).arg(&n);
        // SAFETY: geglu_f32(float*, const float*, int) over n elements of both buffers.
        unsafe { b.launch(cfg(n as usize)) }.during("launching geglu_f32")?;
        Ok(())
    }

    /// `x *= s`.
    pub fn scale(&self, x: &mut CudaSlice<f32>, s: f32) -> Result<()> {
        let n = int(x.len(), "scale length");
        let mut b = self.launch.builder(&self.scale);
        b.arg(x).arg(&s).arg(&n);
        // SAFETY: scale_f32(float*, float, int) over n elements of x.
        unsafe { b.launch(cfg(n as usize)) }.during("launching scale_f32")?;
        Ok(())
    }

    /// In each of `rows` rows (`src_width` and `dst_width` wide), `count` runs of `width`
    /// columns: run `i` from column `src_off + i * src_step` to `dst_off + i * dst_step`
    /// (the CPU's `copy_cols`). The caller has checked that every run lies inside its row.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_cols(
        &self,
        src: &CudaSlice<f32>,
        src_width: usize,
        dst: &mut CudaSlice<f32>,
        dst_width: usize,
        rows: usize,
        runs: [usize; 6],
    ) -> Result<()> {
        let [width, count, src_off, src_step, dst_off, dst_step] = runs;
        assert!(
            src.len() >= rows * src_width && dst.len() >= rows * dst_width,
            "copy_cols: buffers shorter than their rows"
        );
        let total = rows * width * count;
        if total == 0 {
            return Ok(());
        }
        let args = [
            rows, width, count, src_width, src_off, src_step, dst_width, dst_off, dst_step,
        ]
        .map(|v| int(v, "a copy_cols size"));
        int(total, "copy_cols elements");
        let mut b = self.launch.builder(&self.copy_cols);
        b.arg(dst).arg(src);
        for a in &args {
            b.arg(a);
        }
        // SAFETY: copy_cols_f32(float*, const float*, nine ints); every run lies inside its
        // row (checked by the caller) and both buffers hold their rows (asserted above).
        unsafe { b.launch(cfg(total)) }.during("launching copy_cols_f32")?;
        Ok(())
    }

    /// Rotates each chunk of `n` elements of `x` by the orthonormal Walsh-Hadamard matrix, in
    /// place, as the CPU's `hadamard::rotate` (bit-identical); `n` is 64, 128 or 256 (K's
    /// rotation of heads of 256).
    pub fn hadamard(&self, x: &mut CudaSlice<f32>, n: usize) -> Result<()> {
        assert!(
            [64, 128, 256].contains(&n) && x.len().is_multiple_of(n),
            "hadamard: chunks of {n}"
        );
        let chunks = int(x.len() / n, "hadamard chunks");
        let (scale, ni) = (1.0 / (n as f32).sqrt(), int(n, "hadamard size"));
        let mut b = self.launch.builder(&self.hadamard);
        b.arg(x).arg(&scale).arg(&ni);
        let cfg = LaunchConfig {
            grid_dim: (chunks as u32, 1, 1),
            block_dim: (n as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: hadamard_f32(float *x, float scale, int n): a block of n <= 256 threads per
        // chunk of n floats, chunks * n = x.len().
        unsafe { b.launch(cfg) }.during("launching hadamard_f32")?;
        Ok(())
    }

    /// `x` rounded through Q8_0 blocks in place (each 32 values to `f16(d) · q`, the x86
    /// quantizer the CPU quantizes a query with before dotting it with a quantized K).
    pub fn round_q8_0(&self, x: &mut CudaSlice<f32>) -> Result<()> {
        assert!(x.len().is_multiple_of(32), "round_q8_0: not whole blocks");
        let n = int(x.len(), "round_q8_0 length");
        let mut b = self.launch.builder(&self.round_q8_0);
        b.arg(x).arg(&n);
        let cfg = LaunchConfig {
            grid_dim: (stride_blocks(n as usize, THREADS), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: round_q8_0_f32(float *x, int n): n (a multiple of 32) floats, whole warps of
        // a 256-thread block (its shared blocks are sized for 8 warps).
        unsafe { b.launch(cfg) }.during("launching round_q8_0_f32")?;
        Ok(())
    }

    /// The greedy choices of the first `rows` rows of `x` (`width` floats each) into `picks`:
    /// `picks[2r]` the first index of row r's largest value (NaNs passed over, 0 where the row
    /// starts with NaN: the host's `argmax`), `picks[2r + 1]` the same with the first
    /// `n_banned` ids of `banned` taken as -inf. Exact (compares only).
    pub fn greedy_rows(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        width: usize,
        banned: &CudaSlice<u32>,
        n_banned: usize,
        picks: &mut CudaSlice<u32>,
    ) -> Result<()> {
        assert!(x.len() >= rows * width, "greedy_rows: x too small");
        assert!(picks.len() >= 2 * rows, "greedy_rows: picks too small");
        assert!(banned.len() >= n_banned, "greedy_rows: banned too small");
        if rows == 0 {
            return Ok(());
        }
        let (w, nb) = (int(width, "greedy_rows width"), int(n_banned, "banned ids"));
        let mut b = self.launch.builder(&self.greedy_rows);
        b.arg(x).arg(picks).arg(&w).arg(banned).arg(&nb);
        let cfg = LaunchConfig {
            grid_dim: (u32::try_from(rows).expect("rows fit a grid"), 1, 1),
            block_dim: (GREEDY_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: greedy_rows_f32(const float *x, uint32_t *picks, int width, const uint32_t
        // *banned, int n_banned): a block of GREEDY_THREADS a row, rows * width floats of x,
        // 2 * rows picks, n_banned ids (asserted above).
        unsafe { b.launch(cfg) }.during("launching greedy_rows_f32")?;
        Ok(())
    }
}
