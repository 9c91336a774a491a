//! Causal attention with grouped-query heads over the KV cache (`kv`: f32, f16, q8_0, q4_0).

use crate::hadamard;
pub use crate::kv::LayerKv;
use crate::kv::{KvElem, KV_BLOCK};
use crate::plan::{AttnPath, CpuPlan};
use ferrolm_quant::BlockQ8_0;
use half::f16;
use rayon::prelude::*;

pub use ferrolm_model::backend::AttnShape;

/// `out[t][h] = softmax(q[t][h] · K[0..=pos_t][g]ᵀ / sqrt(d)) · V[0..=pos_t][g]` with
/// `g = h / (n_head / n_kv_head)`. The cached history is read once per call (widened to f32,
/// or unpacked to codes), then (token, head) pairs run in parallel.
///
/// A quantized cache may hold its keys or values rotated (`hadamard`, as llama.cpp does): q is
/// rotated as the keys were, and the output rotated back.
///
/// Contract (`plan` decides which, [`CpuPlan::attention_path`]):
/// - [`AttnPath::F32`]: f32 throughout over the cached values (dequantized where quantized),
///   as llama.cpp's precise path and its tiled flash attention: an f32 cache, an f16 cache
///   with a ubatch of at least 64 tokens, or any cache with `FERROLM_ATTN=f32`.
/// - [`AttnPath::OneChunk`]: ggml's `flash_attn_ext_f16_one_chunk`, which llama.cpp runs for
///   f16 caches under 64 rows and for quantized or mixed caches at every size. The score of a
///   key is the K type's `vec_dot` against q converted to K's `vec_dot_type`: f16 K takes q
///   rounded to f16 ([`dot_f16`]); q8_0/q4_0 K take q quantized to Q8_0 and integer dots per
///   block, summed in ggml's eight x86 lanes ([`dot_q8_lanes`]). Then an online softmax over
///   the keys in order whose V accumulator is f16 for an f16 V (rounded at every step) and
///   f32 otherwise (V rows dequantized, `y += v·w` as fused multiply-adds).
///
/// `window`: each token sees only the keys of the last `window` positions up to its own
/// (llama.cpp's standard sliding window; the others are masked to -inf there, which adds
/// nothing to either path). `sinks`: a logit per query head that joins the softmax's maximum
/// and denominator but has no value row (gpt-oss), as ggml's `soft_max` with sinks and its
/// flash attention's closing sink step compute it.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    plan: &CpuPlan,
    q: &[f32],
    kv: &LayerKv,
    positions: &[u32],
    shape: AttnShape,
    window: Option<usize>,
    sinks: Option<&[f32]>,
    out: &mut [f32],
) {
    let AttnShape {
        n_head,
        n_kv_head,
        head_dim,
        ..
    } = shape;
    let n_keys_max = positions.iter().max().map_or(0, |&p| p as usize + 1);
    let span = n_keys_max * head_dim;
    let path = plan.attention_path(kv.ty, positions.len());
    let k_codes = path == AttnPath::OneChunk && kv.ty.k.is_quantized();
    let mut values = vec![0f32; n_kv_head * span];
    // Keys as f32, or (quantized keys on the one-chunk path) as codes and block scales.
    let (mut keys, mut codes, mut scales) = if k_codes {
        (
            vec![],
            vec![0i8; n_kv_head * span],
            vec![0f32; n_kv_head * span / KV_BLOCK],
        )
    } else {
        (vec![0f32; n_kv_head * span], vec![], vec![])
    };
    values
        .par_chunks_mut(span)
        .enumerate()
        .for_each(|(g, v)| kv.values_f32(g, n_keys_max, v));
    if k_codes {
        codes
            .par_chunks_mut(span)
            .zip(scales.par_chunks_mut(span / KV_BLOCK))
            .enumerate()
            .for_each(|(g, (c, d))| kv.key_codes(g, n_keys_max, c, d));
    } else {
        keys.par_chunks_mut(span)
            .enumerate()
            .for_each(|(g, k)| kv.keys_f32(g, n_keys_max, k));
    }

    // The cache's rotation (llama.cpp's, see `hadamard`): q as the keys were, the output back.
    let rotated_q;
    let q = match kv.k_rot {
        Some(n) => {
            rotated_q = {
                let mut r = q.to_vec();
                r.par_chunks_mut(n).for_each(|c| hadamard::rotate(c, n));
                r
            };
            &rotated_q[..]
        }
        None => q,
    };
    let q_width = n_head * head_dim;
    let group = n_head / n_kv_head;
    let scale = shape.scale();
    out.par_chunks_mut(head_dim).enumerate().for_each_init(
        || (Vec::with_capacity(n_keys_max), QRow::new(head_dim)),
        |(scores, qrow), (i, o)| {
            let (t, h) = (i / n_head, i % n_head);
            let g = h / group;
            let qh = &q[t * q_width + h * head_dim..][..head_dim];
            let n_keys = positions[t] as usize + 1;
            // Keys `first..n_keys` are visible: all of them, or the window's.
            let first = window.map_or(0, |w| n_keys.saturating_sub(w));
            let sink = sinks.map(|s| s[h]);
            let v = &values[g * span..][first * head_dim..n_keys * head_dim];
            scores.clear();
            if path == AttnPath::F32 {
                let k = &keys[g * span..][first * head_dim..n_keys * head_dim];
                scores.extend(k.chunks_exact(head_dim).map(|kh| dot(qh, kh) * scale));
                match sink {
                    None => crate::norm::softmax(scores),
                    Some(s) => softmax_with_sink(scores, s),
                }
                o.fill(0.0);
                for (&w, vh) in scores.iter().zip(v.chunks_exact(head_dim)) {
                    for (ov, &vv) in o.iter_mut().zip(vh) {
                        *ov += w * vv;
                    }
                }
                return;
            }
            match kv.ty.k {
                KvElem::F32 => {
                    let k = &keys[g * span..][first * head_dim..n_keys * head_dim];
                    scores.extend(k.chunks_exact(head_dim).map(|kh| dot(qh, kh) * scale));
                }
                KvElem::F16 => {
                    let k = &keys[g * span..][first * head_dim..n_keys * head_dim];
                    let q16 = qrow.f16(qh);
                    scores.extend(k.chunks_exact(head_dim).map(|kh| dot_f16(q16, kh) * scale));
                }
                KvElem::Q8_0 | KvElem::Q4_0 => {
                    let (qc, qd) = qrow.q8_0(qh);
                    let per_key = head_dim / KV_BLOCK;
                    let kc = &codes[g * span..][first * head_dim..n_keys * head_dim];
                    let kd = &scales[g * span / KV_BLOCK..][first * per_key..n_keys * per_key];
                    scores.extend(
                        kc.chunks_exact(head_dim)
                            .zip(kd.chunks_exact(per_key))
                            .map(|(kc, kd)| dot_q8_lanes(kc, kd, qc, qd) * scale),
                    );
                }
            }
            online_softmax(kv.ty.v == KvElem::F16, scores, v, sink, o);
        },
    );
    if let Some(n) = kv.v_rot {
        out.par_chunks_mut(n).for_each(|c| hadamard::rotate(c, n));
    }
}

/// A query row converted to K's `vec_dot_type`, in buffers reused across rows.
struct QRow {
    f16: Vec<f32>,
    codes: Vec<i8>,
    d: Vec<f32>,
}

impl QRow {
    fn new(head_dim: usize) -> Self {
        Self {
            f16: vec![0.0; head_dim],
            codes: vec![0; head_dim],
            d: vec![0.0; head_dim / KV_BLOCK],
        }
    }

    /// `q` rounded to f16 (each value then exactly an f16).
    fn f16(&mut self, q: &[f32]) -> &[f32] {
        for (d, &s) in self.f16.iter_mut().zip(q) {
            *d = f16::from_f32(s).to_f32();
        }
        &self.f16
    }

    /// `q` quantized to Q8_0 blocks as ggml's x86 `from_float` does: codes and one scale per 32.
    fn q8_0(&mut self, q: &[f32]) -> (&[i8], &[f32]) {
        for ((x, c), d) in q
            .chunks_exact(KV_BLOCK)
            .zip(self.codes.chunks_exact_mut(KV_BLOCK))
            .zip(&mut self.d)
        {
            let b = BlockQ8_0::quantize_x86(x.try_into().expect("whole blocks"));
            c.copy_from_slice(b.codes());
            *d = b.d();
        }
        (&self.codes, &self.d)
    }
}

/// ggml's x86 `vec_dot_q8_0_q8_0` / `vec_dot_q4_0_q8_0` (AVX2 build): per 32-element block,
/// eight lanes each take the exact integer dot of 4 consecutive elements as
/// `lane = fma(dk · dq, dot, lane)`, and the lanes fold as a 256-bit register is halved
/// (`hsum_float_8`). `kc`/`qc` are signed codes (Q4_0's with the 8 already taken off).
fn dot_q8_lanes(kc: &[i8], kd: &[f32], qc: &[i8], qd: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: FMA was just detected.
        return unsafe { dot_q8_lanes_fma(kc, kd, qc, qd) };
    }
    dot_q8_lanes_body(kc, kd, qc, qd)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn dot_q8_lanes_fma(kc: &[i8], kd: &[f32], qc: &[i8], qd: &[f32]) -> f32 {
    dot_q8_lanes_body(kc, kd, qc, qd)
}

#[inline(always)]
fn dot_q8_lanes_body(kc: &[i8], kd: &[f32], qc: &[i8], qd: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    for (((kb, &dk), qb), &dq) in kc
        .chunks_exact(KV_BLOCK)
        .zip(kd)
        .zip(qc.chunks_exact(KV_BLOCK))
        .zip(qd)
    {
        let s = dk * dq;
        for (l, lane) in lanes.iter_mut().enumerate() {
            let dot: i32 = (4 * l..4 * l + 4)
                .map(|i| i32::from(kb[i]) * i32::from(qb[i]))
                .sum();
            *lane = s.mul_add(dot as f32, *lane);
        }
    }
    let h = [
        lanes[0] + lanes[4],
        lanes[1] + lanes[5],
        lanes[2] + lanes[6],
        lanes[3] + lanes[7],
    ];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// ggml's one-chunk flash attention over precomputed scores: a running maximum, the V
/// accumulator (f16 when `f16_acc`, rounded at every step, else f32) rescaled when the maximum
/// grows, one division at the end. The V update and the running sum are fused multiply-adds,
/// as ggml's (the sum by the C compiler's contraction of `S*ms + vs`).
fn online_softmax(f16_acc: bool, scores: &[f32], v: &[f32], sink: Option<f32>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if f16_acc
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
    {
        // SAFETY: AVX (implied by FMA), FMA and F16C were just detected.
        return unsafe { online_softmax_f16c(scores, v, sink, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: FMA was just detected.
        return unsafe {
            if f16_acc {
                online_softmax_fma::<true>(scores, v, sink, out)
            } else {
                online_softmax_fma::<false>(scores, v, sink, out)
            }
        };
    }
    if f16_acc {
        online_softmax_body::<true>(scores, v, sink, out)
    } else {
        online_softmax_body::<false>(scores, v, sink, out)
    }
}

/// The same, with `mul_add` as one instruction rather than a library call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn online_softmax_fma<const F16_ACC: bool>(
    scores: &[f32],
    v: &[f32],
    sink: Option<f32>,
    out: &mut [f32],
) {
    online_softmax_body::<F16_ACC>(scores, v, sink, out)
}

#[inline(always)]
fn online_softmax_body<const F16_ACC: bool>(
    scores: &[f32],
    v: &[f32],
    sink: Option<f32>,
    out: &mut [f32],
) {
    let head_dim = out.len();
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    // With an f16 accumulator its values are always exactly f16s.
    out.fill(0.0);
    let round = |x: f32| {
        if F16_ACC {
            f16::from_f32(x).to_f32()
        } else {
            x
        }
    };
    for (&s, vh) in scores.iter().zip(v.chunks_exact(head_dim)) {
        let (ms, vs) = if s > m {
            let ms = (m - s).exp();
            m = s;
            for a in out.iter_mut() {
                *a = round(*a * ms);
            }
            (ms, 1.0)
        } else {
            (1.0, (s - m).exp())
        };
        for (a, &vv) in out.iter_mut().zip(vh) {
            *a = round(vv.mul_add(vs, *a));
        }
        sum = sum.mul_add(ms, vs);
    }
    finish_softmax(m, sum, sink, out);
}

/// [`online_softmax_body`] with an f16 accumulator, eight values at a time: F16C's conversions
/// round to nearest even as `half`'s do, so every value is the same, without a call per value
/// (at a short context those calls were a fifth of CPU decode).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma,f16c")]
unsafe fn online_softmax_f16c(scores: &[f32], v: &[f32], sink: Option<f32>, out: &mut [f32]) {
    use std::arch::x86_64::*;
    // Through f16 and back, rounding to nearest even.
    fn round8(x: __m256) -> __m256 {
        // SAFETY: only called from this function, which has F16C.
        unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }
    let round1 = |x: f32| f16::from_f32(x).to_f32();
    let head_dim = out.len();
    let whole = head_dim / 8 * 8;
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    out.fill(0.0);
    for (&s, vh) in scores.iter().zip(v.chunks_exact(head_dim)) {
        let (ms, vs) = if s > m {
            let ms = (m - s).exp();
            m = s;
            let msv = _mm256_set1_ps(ms);
            for i in (0..whole).step_by(8) {
                let p = out.as_mut_ptr().add(i);
                _mm256_storeu_ps(p, round8(_mm256_mul_ps(_mm256_loadu_ps(p), msv)));
            }
            for a in &mut out[whole..] {
                *a = round1(*a * ms);
            }
            (ms, 1.0)
        } else {
            (1.0, (s - m).exp())
        };
        let vsv = _mm256_set1_ps(vs);
        for i in (0..whole).step_by(8) {
            let p = out.as_mut_ptr().add(i);
            let x = _mm256_fmadd_ps(_mm256_loadu_ps(vh.as_ptr().add(i)), vsv, _mm256_loadu_ps(p));
            _mm256_storeu_ps(p, round8(x));
        }
        for (a, &vv) in out[whole..].iter_mut().zip(&vh[whole..]) {
            *a = round1(vv.mul_add(vs, *a));
        }
        sum = sum.mul_add(ms, vs);
    }
    finish_softmax(m, sum, sink, out);
}

/// The end of the online softmax over the keys: the sink, then the division.
#[inline(always)]
fn finish_softmax(m: f32, mut sum: f32, sink: Option<f32>, out: &mut [f32]) {
    // The sink joins after the keys, on the f32 accumulator (ggml converts an f16 one first):
    // it rescales the values if it is the new maximum, and adds its weight to the sum.
    if let Some(s) = sink {
        let (ms, vs) = if s > m {
            let ms = (m - s).exp();
            for a in out.iter_mut() {
                *a *= ms;
            }
            (ms, 1.0)
        } else {
            (1.0, (s - m).exp())
        };
        sum = sum.mul_add(ms, vs);
    }
    let inv = 1.0 / sum;
    for a in out.iter_mut() {
        *a *= inv;
    }
}

/// Softmax in place with a sink logit `s` in the maximum and the denominator, as ggml's
/// `soft_max` with sinks: the exponentials' sum in f64, the sink's term added after.
fn softmax_with_sink(x: &mut [f32], s: f32) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max).max(s);
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    sum += f64::from((s - max).exp());
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `Σ a·b` for values that are all exactly f16 (so every product is exact in f32), summed in
/// the order of ggml's x86 f16 dot product (`ggml_vec_dot_f16`, AVX-512 build): 64 elements
/// per step into four 16-lane accumulators, which are folded pairwise (0+2, 1+3, then the two),
/// then halved lane-wise down to one value; leftover elements (`len % 64`) are added in f64.
fn dot_f16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [[0f32; 16]; 4];
    let whole = a.len() / 64 * 64;
    for (x, y) in a[..whole].chunks_exact(64).zip(b[..whole].chunks_exact(64)) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for (l, a) in acc.iter_mut().enumerate() {
                *a += x[16 * j + l] * y[16 * j + l];
            }
        }
    }
    let mut r = [0f32; 16];
    for (l, r) in r.iter_mut().enumerate() {
        *r = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let mut width = 8;
    while width > 1 {
        for l in 0..width {
            r[l] += r[l + width];
        }
        width /= 2;
    }
    let mut sum = f64::from(r[0] + r[1]);
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += f64::from(x * y);
    }
    sum as f32
}

/// Eight independent accumulators, so the loop vectorises without reassociation flags.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, a_tail) = a.split_at(a.len() / 8 * 8);
    let (b8, b_tail) = b.split_at(a8.len());
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
