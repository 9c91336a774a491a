//! `out = x · Wᵀ` for a ggml weight `W` of `rows` rows of `cols` elements.
//!
//! # Fast path
//! The activation rows are quantized once per call into the weight's partner format
//! ([`activation_type`]: Q8_0, Q8_1 or Q8_K) as llama.cpp's x86 CPU backend does (Q8_0/Q8_1:
//! ggml's AVX2 `quantize_row_q8_0`, `127 / absmax` and half to even, `BlockQ8_0::quantize_x86`;
//! Q8_K: its reference quantizer, which x86 builds use), then
//! every weight block is dotted with the activation blocks in integers, as llama.cpp does.
//! Every quantized format is seen the same way (`formats`): units of 16 or 32 elements with
//! unsigned 8-bit codes, a scale, and either a constant code bias (symmetric formats: Q4_0,
//! Q5_0, Q8_0, Q3_K, Q6_K) or an f32 offset (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K). A unit's dot is
//! `scale·dx·(Σ code·q - bias·Σ q) + off·(dx·Σ q)`: one integer dot (`vpdpbusd` where the CPU
//! has it) that starts from `-bias·Σ q`, so the bias cancels exactly, one f32 multiply-add per
//! unit, and for offset formats one more against the activation's exact `dx·Σ q` (not Q8_1's
//! f16-rounded `s`, which would stray from the reference by ~5e-4).
//!
//! Q4_K instead follows llama.cpp's x86 arithmetic exactly (integer scales, one f32 step per
//! pair of units or per block, mins in their own accumulator: `Format::INT_SCALES`, [`Order`]),
//! so that its results are bit-identical with llama.cpp's, on every level and path. Q8_0 and
//! Q5_0 likewise keep llama.cpp's eight f32 lanes per output (`Format::LANES`, `lanes`); their
//! prefill takes `x86::lanes`' tiles straight from the blocks instead of the repacked GEMM.
//!
//! - Few tokens (decode, n < 4): each weight row is decoded in registers 32 codes at a time and
//!   dotted with each token (`x86::gemv`); rows are prefetched ahead and split over rayon tasks.
//! - More tokens (prefill): weights are repacked once per call so that one vector holds the
//!   same 4 codes of 16 (AVX-512) or 8 (AVX2) rows; a micro-kernel multiplies that by up to 8
//!   (AVX-512) or 4 (AVX2) tokens with broadcast activations, so each weight vector is loaded
//!   once per tile and no horizontal sums are needed (`x86::gemm`). Tokens split over tasks.
//! - F32/F16/BF16 weights: activations rounded through the weight type like the reference,
//!   rows converted to f32 once, FMA dots (`float`).
//!
//! Three levels ([`Isa`]), chosen at run time: portable scalar, AVX2+FMA+F16C, and AVX-512
//! (F/BW/VL/VNNI). Format decoders need only AVX2 and are shared by both x86 levels.
//!
//! # Contract
//! The fast path equals [`matmul_reference`] up to f32 summation order: both evaluate the same
//! products of the same rounded operands (the reference dequantizes the quantized activations
//! and weights; the integer dots are exact). The tests bound
//! `|fast - reference| ≤ 2e-6 · Σ_c |x'_c · w'_c|` for every type, level and path (see
//! `tests.rs` for why that bound).
//!
//! Which level and kernel run is the [`CpuPlan`]'s decision (`FERROLM_CPU_MATMUL=reference`
//! forces the reference path, for bisecting; `scalar` or `avx2` cap the kernel level; the row
//! threshold between the two kernels; batch-invariant mode): [`matmul`] takes the plan.

mod act;
mod float;
mod formats;
mod lanes;
mod mxfp4;
mod quantized;
mod reference;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::plan::{CpuPlan, MatmulMode};
use ferrolm_gguf::GgmlType;
pub use float::dot_f32_avx512_order;
pub use reference::matmul_reference;

/// A weight matrix viewed in place: `rows` rows of `cols` elements of type `ty`.
#[derive(Clone, Copy, Debug)]
pub struct WeightRef<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl<'a> WeightRef<'a> {
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_elems() * self.ty.block_bytes()
    }

    /// Rows `r0..r0+n` as a smaller weight (one expert of a stacked tensor, say).
    pub fn slice_rows(&self, r0: usize, n: usize) -> WeightRef<'a> {
        let rb = self.row_bytes();
        WeightRef {
            ty: self.ty,
            data: &self.data[r0 * rb..(r0 + n) * rb],
            rows: n,
            cols: self.cols,
        }
    }

    /// Dequantizes row `r` into `out` (`cols` floats).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let rb = self.row_bytes();
        ferrolm_quant::dequantize(self.ty, &self.data[r * rb..(r + 1) * rb], out)
            .expect("weight type and shape were validated at load");
    }
}

/// The format llama.cpp converts activations to before a dot product with `ty` weights.
pub fn activation_type(ty: GgmlType) -> GgmlType {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | Mxfp4 => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2K | Q3K | Q4K | Q5K | Q6K => Q8K,
        other => other,
    }
}

/// A kernel level. Exposed for tests and benchmarks, which run every level the CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AVX2, FMA and F16C.
    Avx2,
    /// AVX-512 F, BW, VL and VNNI, on top of the AVX2 set.
    Avx512,
}

impl Isa {
    /// The best level this CPU runs.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            let avx512 =
                has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vnni");
            if avx2 && avx512 {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    /// Every level this CPU runs, lowest first.
    pub fn available() -> Vec<Isa> {
        let best = Isa::detect();
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i <= best)
            .collect()
    }
}

/// How a quantized matmul is evaluated. `Auto` lets the plan pick by the number of tokens; the
/// others exist so tests reach both kernels at every size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Auto,
    /// Row by row, each row decoded in registers (the decode kernel).
    Gemv,
    /// Repacked weight tiles times several tokens (the prefill kernel; not at scalar level).
    Gemm,
}

/// For integer-scale formats (Q4_K, see `formats::Format::INT_SCALES`): how many leading
/// tokens of a call sum their dots per pair of units, the rest per block. llama.cpp's x86
/// matmul on repacked Q4_K weights takes whole groups of 4 tokens through its tiled kernel
/// (pairs) and the remaining `n % 4`, or all of a call under 4 tokens, through its one-row
/// kernel (blocks); its expert matmuls take every token one row at a time (blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// llama.cpp's dense matmul: pairs for the first `n - n % 4` tokens when `n ≥ 4`.
    Dense,
    /// Blocks for every token, independently of the others (experts; batch-invariant mode).
    Rows,
}

/// `out[t][r] = Σ_c x[t][c] · W[r][c]` for `n = x.len() / cols` tokens, as `plan` says.
pub fn matmul(plan: &CpuPlan, w: &WeightRef, x: &[f32], out: &mut [f32]) {
    matmul_ordered(plan, Order::Dense, w, x, out)
}

/// [`matmul`] with an explicit [`Order`] (the MoE experts take `Order::Rows`).
pub fn matmul_ordered(plan: &CpuPlan, order: Order, w: &WeightRef, x: &[f32], out: &mut [f32]) {
    match plan.matmul_mode() {
        MatmulMode::Reference => matmul_reference(w, x, out),
        MatmulMode::Fast(isa) => matmul_planned(plan, isa, Path::Auto, order, w, x, out),
    }
}

/// [`matmul`] on a given kernel level and path, with no switches set (`Path::Auto` picks as
/// the default plan does). `isa` must be one of [`Isa::available`].
pub fn matmul_with(isa: Isa, path: Path, w: &WeightRef, x: &[f32], out: &mut [f32]) {
    matmul_full(isa, path, Order::Dense, w, x, out)
}

/// [`matmul_with`] with an explicit [`Order`].
pub fn matmul_full(isa: Isa, path: Path, order: Order, w: &WeightRef, x: &[f32], out: &mut [f32]) {
    matmul_planned(&CpuPlan::with_isa(isa), isa, path, order, w, x, out)
}

/// The fast path at level `isa`; `Path::Auto` and the order's pair count as `plan` decides.
fn matmul_planned(
    plan: &CpuPlan,
    isa: Isa,
    path: Path,
    order: Order,
    w: &WeightRef,
    x: &[f32],
    out: &mut [f32],
) {
    assert!(isa <= Isa::detect(), "{isa:?} is not available on this CPU");
    assert!(x.len().is_multiple_of(w.cols), "x is not whole rows");
    assert_eq!(
        out.len(),
        x.len() / w.cols * w.rows,
        "out has the wrong size"
    );
    assert_eq!(w.data.len(), w.rows * w.row_bytes(), "weight data size");
    let n = x.len() / w.cols;
    let path = match path {
        Path::Auto => plan.quantized_path(isa, n),
        chosen => chosen,
    };
    let pairs = plan.pair_tokens(order, n);
    if !quantized::matmul(isa, path, pairs, w, x, out) && !float::matmul(isa, w, x, out) {
        matmul_reference(w, x, out);
    }
}

/// `out[t][r] = out_t[r][t]`: from the row-major layout tasks fill to the token-major result.
fn transpose_into(out_t: &[f32], n: usize, out: &mut [f32]) {
    if n == 1 {
        out.copy_from_slice(out_t);
        return;
    }
    let rows = out_t.len() / n;
    for (r, col) in out_t.chunks_exact(n).enumerate() {
        for (t, &v) in col.iter().enumerate() {
            out[t * rows + r] = v;
        }
    }
}

/// Splits `len` items into chunks for rayon: about `per_thread` chunks per thread (so a core
/// slowed by a neighbour does not hold everyone up), at least `min` items each.
fn chunk_len(len: usize, min: usize, per_thread: usize) -> usize {
    let tasks = rayon::current_num_threads() * per_thread;
    len.div_ceil(tasks).max(min).max(1)
}
