//! Causal attention with grouped-query heads over an f16 KV cache.

use crate::plan::CpuPlan;
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Element type of the KV cache, as llama.cpp's `-ctk/-ctv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// llama.cpp's default: half the memory of f32 at well under int8 error.
    #[default]
    F16,
    /// Exact: what llama.cpp's "precise" configuration uses.
    F32,
}

enum Store {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl Store {
    fn new(ty: KvType, len: usize) -> Self {
        match ty {
            KvType::F16 => Store::F16(vec![f16::ZERO; len]),
            KvType::F32 => Store::F32(vec![0.0; len]),
        }
    }

    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Store::F16(v) => v[at..at + src.len()].convert_from_f32_slice(src),
            Store::F32(v) => v[at..at + src.len()].copy_from_slice(src),
        }
    }

    fn read(&self, at: usize, dst: &mut [f32]) {
        match self {
            Store::F16(v) => v[at..at + dst.len()].convert_to_f32_slice(dst),
            Store::F32(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
        }
    }
}

/// One layer's keys and values. Head-major (`[n_kv_head][n_ctx][head_dim]`) so one head's
/// history is a contiguous run that widens to f32 in one vectorised pass.
pub struct LayerKv {
    k: Store,
    v: Store,
    ty: KvType,
    n_ctx: usize,
    n_kv_head: usize,
    head_dim: usize,
}

impl LayerKv {
    pub fn new(ty: KvType, n_ctx: usize, n_kv_head: usize, head_dim: usize) -> Self {
        let len = n_ctx * n_kv_head * head_dim;
        Self {
            k: Store::new(ty, len),
            v: Store::new(ty, len),
            ty,
            n_ctx,
            n_kv_head,
            head_dim,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn at(&self, g: usize, p: usize) -> usize {
        (g * self.n_ctx + p) * self.head_dim
    }

    /// Stores rows of `k` and `v` (`[n][n_kv_head * head_dim]`) at positions `pos0..pos0+n`.
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let hd = self.head_dim;
        let width = self.n_kv_head * hd;
        for (t, (kr, vr)) in k.chunks_exact(width).zip(v.chunks_exact(width)).enumerate() {
            for g in 0..self.n_kv_head {
                let at = self.at(g, pos0 + t);
                self.k.write(at, &kr[g * hd..(g + 1) * hd]);
                self.v.write(at, &vr[g * hd..(g + 1) * hd]);
            }
        }
    }

    /// Positions `0..n` of head `g`'s keys and values, widened to f32.
    fn head_f32(&self, g: usize, n: usize, k: &mut [f32], v: &mut [f32]) {
        let at = self.at(g, 0);
        self.k.read(at, &mut k[..n * self.head_dim]);
        self.v.read(at, &mut v[..n * self.head_dim]);
    }
}

pub use ferrolm_model::backend::AttnShape;

/// `out[t][h] = softmax(q[t][h] · K[0..=pos_t][g]ᵀ / sqrt(d)) · V[0..=pos_t][g]` with
/// `g = h / (n_head / n_kv_head)`. The cached history is widened to f32 once per call, then
/// (token, head) pairs run in parallel over plain f32 loops the compiler vectorises.
///
/// Contract: with an f32 cache, or a ubatch of at least 64 tokens, the arithmetic is f32
/// throughout, as llama.cpp's precise path and its tiled flash attention. With an f16 cache
/// and fewer tokens (decode), it reproduces ggml's `flash_attn_ext_f16_one_chunk`: q rounded
/// to f16 and an online softmax whose V accumulator is rounded to f16 at every step. That
/// costs a little precision and buys agreement with llama.cpp's default configuration;
/// `FERROLM_ATTN=f32` turns it off. `plan` decides which ([`CpuPlan::attention_ggml_f16`]).
pub fn attention(
    plan: &CpuPlan,
    q: &[f32],
    kv: &LayerKv,
    positions: &[u32],
    shape: AttnShape,
    out: &mut [f32],
) {
    let AttnShape {
        n_head,
        n_kv_head,
        head_dim,
    } = shape;
    let n_keys_max = positions.iter().max().map_or(0, |&p| p as usize + 1);
    let span = n_keys_max * head_dim;
    let mut keys = vec![0f32; n_kv_head * span];
    let mut values = vec![0f32; n_kv_head * span];
    keys.par_chunks_mut(span)
        .zip(values.par_chunks_mut(span))
        .enumerate()
        .for_each(|(g, (k, v))| kv.head_f32(g, n_keys_max, k, v));

    let ggml_f16 = plan.attention_ggml_f16(kv.ty, positions.len());
    let q_width = n_head * head_dim;
    let group = n_head / n_kv_head;
    let scale = 1.0 / (head_dim as f32).sqrt();
    out.par_chunks_mut(head_dim).enumerate().for_each_init(
        || (Vec::with_capacity(n_keys_max), vec![0f32; head_dim]),
        |(scores, q16), (i, o)| {
            let (t, h) = (i / n_head, i % n_head);
            let g = h / group;
            let mut qh = &q[t * q_width + h * head_dim..][..head_dim];
            if ggml_f16 {
                for (d, &s) in q16.iter_mut().zip(qh) {
                    *d = f16::from_f32(s).to_f32();
                }
                qh = q16;
            }
            let n_keys = positions[t] as usize + 1;
            let k = &keys[g * span..][..n_keys * head_dim];
            let v = &values[g * span..][..n_keys * head_dim];
            scores.clear();
            if ggml_f16 {
                scores.extend(k.chunks_exact(head_dim).map(|kh| dot_f16(qh, kh) * scale));
                online_softmax_f16_accumulator(scores, v, o);
                return;
            }
            scores.extend(k.chunks_exact(head_dim).map(|kh| dot(qh, kh) * scale));
            crate::norm::softmax(scores);
            o.fill(0.0);
            for (&w, vh) in scores.iter().zip(v.chunks_exact(head_dim)) {
                for (ov, &vv) in o.iter_mut().zip(vh) {
                    *ov += w * vv;
                }
            }
        },
    );
}

/// ggml's one-chunk flash attention over precomputed scores: a running maximum, the V
/// accumulator kept in f16 (rescaled when the maximum grows), one division at the end. The
/// V update and the running sum are fused multiply-adds, as ggml's (the sum by the C
/// compiler's contraction of `S*ms + vs`).
fn online_softmax_f16_accumulator(scores: &[f32], v: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: FMA was just detected.
        return unsafe { online_softmax_fma(scores, v, out) };
    }
    online_softmax_body(scores, v, out)
}

/// The same, with `mul_add` as one instruction rather than a library call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn online_softmax_fma(scores: &[f32], v: &[f32], out: &mut [f32]) {
    online_softmax_body(scores, v, out)
}

#[inline(always)]
fn online_softmax_body(scores: &[f32], v: &[f32], out: &mut [f32]) {
    let head_dim = out.len();
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    // The accumulator's values, each always exactly an f16.
    out.fill(0.0);
    let round = |x: f32| f16::from_f32(x).to_f32();
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
    let inv = 1.0 / sum;
    for a in out.iter_mut() {
        *a *= inv;
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
mod tests {
    use super::*;

    fn kv_k(kv: &LayerKv, g: usize, p: usize, i: usize) -> f64 {
        let mut row = vec![0f32; kv.head_dim];
        kv.k.read(kv.at(g, p), &mut row);
        row[i] as f64
    }

    fn kv_v(kv: &LayerKv, g: usize, p: usize, i: usize) -> f64 {
        let mut row = vec![0f32; kv.head_dim];
        kv.v.read(kv.at(g, p), &mut row);
        row[i] as f64
    }

    /// Plain f64 attention over the cached values.
    fn reference(q: &[f32], kv: &LayerKv, positions: &[u32], s: AttnShape) -> Vec<f64> {
        let qw = s.n_head * s.head_dim;
        let mut out = vec![0.0; q.len()];
        for (t, &pos) in positions.iter().enumerate() {
            for h in 0..s.n_head {
                let g = h / (s.n_head / s.n_kv_head);
                let qh = &q[t * qw + h * s.head_dim..][..s.head_dim];
                let scores: Vec<f64> = (0..=pos as usize)
                    .map(|p| {
                        (0..s.head_dim)
                            .map(|i| qh[i] as f64 * kv_k(kv, g, p, i))
                            .sum::<f64>()
                            / (s.head_dim as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                for (p, sc) in scores.iter().enumerate() {
                    let w = (sc - m).exp() / z;
                    for i in 0..s.head_dim {
                        out[t * qw + h * s.head_dim + i] += w * kv_v(kv, g, p, i);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn causal_gqa_matches_f64_reference() {
        let s = AttnShape {
            n_head: 4,
            n_kv_head: 2,
            head_dim: 8,
        };
        let n = 5;
        let val = |i: usize| ((i * 7919 % 97) as f32 / 97.0 - 0.5) * 2.0;
        let k: Vec<f32> = (0..n * 16).map(val).collect();
        let v: Vec<f32> = (0..n * 16).map(|i| val(i + 11)).collect();
        let q: Vec<f32> = (0..n * 32).map(|i| val(i + 5)).collect();
        let mut kv = LayerKv::new(KvType::F32, 8, 2, 8);
        kv.store(0, &k, &v);
        let positions: Vec<u32> = (0..n as u32).collect();
        let mut out = vec![0.0; q.len()];
        attention(&CpuPlan::detect(), &q, &kv, &positions, s, &mut out);
        let want = reference(&q, &kv, &positions, s);
        for (a, b) in out.iter().zip(&want) {
            assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
        }
        // The first token sees only itself: its output is its own value row.
        assert!((out[0] - v[0]).abs() < 1e-2);
    }

    /// With an f16 cache and a small batch, the ggml-style f16 accumulator is in use: the
    /// result stays within f16 rounding of the exact answer, but is not the f32 result.
    #[test]
    fn small_f16_batches_round_like_ggml() {
        let s = AttnShape {
            n_head: 2,
            n_kv_head: 1,
            head_dim: 64,
        };
        let n = 6;
        let val = |i: usize| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 3.0;
        let k: Vec<f32> = (0..n * 64).map(val).collect();
        let v: Vec<f32> = (0..n * 64).map(|i| val(i + 13)).collect();
        let q: Vec<f32> = (0..n * 128).map(|i| val(i + 29)).collect();
        let positions: Vec<u32> = (0..n as u32).collect();
        let mut kv16 = LayerKv::new(KvType::F16, 8, 1, 64);
        kv16.store(0, &k, &v);
        let mut out16 = vec![0.0; q.len()];
        attention(&CpuPlan::detect(), &q, &kv16, &positions, s, &mut out16);
        let want = reference(&q, &kv16, &positions, s);
        let mut worst = 0f64;
        for (a, b) in out16.iter().zip(&want) {
            worst = worst.max((*a as f64 - b).abs());
        }
        assert!(worst < 1e-2, "f16 accumulation error {worst}");
        assert!(worst > 1e-6, "the f16 path was not taken ({worst})");
    }
}
