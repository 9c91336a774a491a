//! Causal attention with grouped-query heads over an f16 KV cache.

use half::f16;
use rayon::prelude::*;

/// One layer's keys and values, `[n_ctx][n_kv_heads * head_dim]` each, stored as f16 as
/// llama.cpp does by default: half the memory traffic of f32 at well under int8 error.
pub struct LayerKv {
    pub k: Vec<f16>,
    pub v: Vec<f16>,
    kv_width: usize,
}

impl LayerKv {
    pub fn new(n_ctx: usize, kv_width: usize) -> Self {
        Self {
            k: vec![f16::ZERO; n_ctx * kv_width],
            v: vec![f16::ZERO; n_ctx * kv_width],
            kv_width,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.k.len() / self.kv_width
    }

    /// Stores rows of `k` and `v` (`[n][kv_width]`) at positions `pos0..pos0+n`.
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let at = pos0 * self.kv_width;
        for (dst, &src) in self.k[at..at + k.len()].iter_mut().zip(k) {
            *dst = f16::from_f32(src);
        }
        for (dst, &src) in self.v[at..at + v.len()].iter_mut().zip(v) {
            *dst = f16::from_f32(src);
        }
    }
}

pub use ferrolm_model::backend::AttnShape;

/// `out[t][h] = softmax(q[t][h] · K[0..=pos_t][g]ᵀ / sqrt(d)) · V[0..=pos_t][g]` with
/// `g = h / (n_head / n_kv_head)`. Tokens and heads run in parallel.
pub fn attention(q: &[f32], kv: &LayerKv, positions: &[u32], shape: AttnShape, out: &mut [f32]) {
    let AttnShape {
        n_head,
        n_kv_head,
        head_dim,
    } = shape;
    let q_width = n_head * head_dim;
    let kv_width = n_kv_head * head_dim;
    let group = n_head / n_kv_head;
    let scale = 1.0 / (head_dim as f32).sqrt();
    out.par_chunks_mut(head_dim).enumerate().for_each(|(i, o)| {
        let (t, h) = (i / n_head, i % n_head);
        let g = h / group;
        let qh = &q[t * q_width + h * head_dim..][..head_dim];
        let n_keys = positions[t] as usize + 1;
        let mut scores: Vec<f32> = (0..n_keys)
            .map(|p| {
                let kh = &kv.k[p * kv_width + g * head_dim..][..head_dim];
                dot_f16(qh, kh) * scale
            })
            .collect();
        crate::norm::softmax(&mut scores);
        o.fill(0.0);
        for (p, &w) in scores.iter().enumerate() {
            let vh = &kv.v[p * kv_width + g * head_dim..][..head_dim];
            for (ov, &vv) in o.iter_mut().zip(vh) {
                *ov += w * vv.to_f32();
            }
        }
    });
}

fn dot_f16(a: &[f32], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(&x, &y)| x * y.to_f32()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain f64 attention over the f16-rounded cache.
    fn reference(q: &[f32], kv: &LayerKv, positions: &[u32], s: AttnShape) -> Vec<f64> {
        let (qw, kw) = (s.n_head * s.head_dim, s.n_kv_head * s.head_dim);
        let mut out = vec![0.0; q.len()];
        for (t, &pos) in positions.iter().enumerate() {
            for h in 0..s.n_head {
                let g = h / (s.n_head / s.n_kv_head);
                let qh = &q[t * qw + h * s.head_dim..][..s.head_dim];
                let scores: Vec<f64> = (0..=pos as usize)
                    .map(|p| {
                        (0..s.head_dim)
                            .map(|i| qh[i] as f64 * kv.k[p * kw + g * s.head_dim + i].to_f64())
                            .sum::<f64>()
                            / (s.head_dim as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                for (p, sc) in scores.iter().enumerate() {
                    let w = (sc - m).exp() / z;
                    for i in 0..s.head_dim {
                        out[t * qw + h * s.head_dim + i] +=
                            w * kv.v[p * kw + g * s.head_dim + i].to_f64();
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
        let mut kv = LayerKv::new(8, 16);
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
