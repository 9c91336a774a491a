//! Causal attention with grouped-query heads over an f16 KV cache.

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// One layer's keys and values, stored as f16 as llama.cpp does by default: half the memory of
/// f32 at well under int8 error. Head-major (`[n_kv_head][n_ctx][head_dim]`) so one head's
/// history is a contiguous run that converts to f32 in one vectorised pass.
pub struct LayerKv {
    k: Vec<f16>,
    v: Vec<f16>,
    n_ctx: usize,
    n_kv_head: usize,
    head_dim: usize,
}

impl LayerKv {
    pub fn new(n_ctx: usize, n_kv_head: usize, head_dim: usize) -> Self {
        let len = n_ctx * n_kv_head * head_dim;
        Self {
            k: vec![f16::ZERO; len],
            v: vec![f16::ZERO; len],
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
                self.k[at..at + hd].convert_from_f32_slice(&kr[g * hd..(g + 1) * hd]);
                self.v[at..at + hd].convert_from_f32_slice(&vr[g * hd..(g + 1) * hd]);
            }
        }
    }

    /// Positions `0..n` of head `g`'s keys and values, widened to f32.
    fn head_f32(&self, g: usize, n: usize, k: &mut [f32], v: &mut [f32]) {
        let at = self.at(g, 0);
        let len = n * self.head_dim;
        self.k[at..at + len].convert_to_f32_slice(k);
        self.v[at..at + len].convert_to_f32_slice(v);
    }
}

pub use ferrolm_model::backend::AttnShape;

/// `out[t][h] = softmax(q[t][h] · K[0..=pos_t][g]ᵀ / sqrt(d)) · V[0..=pos_t][g]` with
/// `g = h / (n_head / n_kv_head)`. The cached history is widened to f32 once per call, then
/// (token, head) pairs run in parallel over plain f32 loops the compiler vectorises.
pub fn attention(q: &[f32], kv: &LayerKv, positions: &[u32], shape: AttnShape, out: &mut [f32]) {
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

    let q_width = n_head * head_dim;
    let group = n_head / n_kv_head;
    let scale = 1.0 / (head_dim as f32).sqrt();
    out.par_chunks_mut(head_dim).enumerate().for_each_init(
        || Vec::with_capacity(n_keys_max),
        |scores, (i, o)| {
            let (t, h) = (i / n_head, i % n_head);
            let g = h / group;
            let qh = &q[t * q_width + h * head_dim..][..head_dim];
            let n_keys = positions[t] as usize + 1;
            let k = &keys[g * span..][..n_keys * head_dim];
            let v = &values[g * span..][..n_keys * head_dim];
            scores.clear();
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

    /// Plain f64 attention over the f16-rounded cache.
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
                            .map(|i| qh[i] as f64 * kv.k[kv.at(g, p) + i].to_f64())
                            .sum::<f64>()
                            / (s.head_dim as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                for (p, sc) in scores.iter().enumerate() {
                    let w = (sc - m).exp() / z;
                    for i in 0..s.head_dim {
                        out[t * qw + h * s.head_dim + i] += w * kv.v[kv.at(g, p) + i].to_f64();
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
        let mut kv = LayerKv::new(8, 2, 8);
        kv.store(0, &k, &v);
        let positions: Vec<u32> = (0..n as u32).collect();
        let mut out = vec![0.0; q.len()];
        attention(&q, &kv, &positions, s, &mut out);
        let want = reference(&q, &kv, &positions, s);
        for (a, b) in out.iter().zip(&want) {
            assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
        }
        // The first token sees only itself: its output is its own value row.
        assert!((out[0] - v[0]).abs() < 1e-2);
    }
}
