//! Rotary position embeddings, in the two layouts ggml knows, with its frequency factors and
//! linear/YaRN scaling.

pub use ferrolm_model::backend::{Rope, RopeMode};

/// Rotates every head of every row in `x` (`[n_tokens][n_heads * head_dim]`), token `t`
/// at position `positions[t]`, as `rope` says (ggml's `rope_yarn`, see [`Rope`]); `factors`
/// divide each pair's frequency (llama3's `rope_freqs`). Angles follow ggml:
/// `theta_i = pos * base^(-2i/d)`, built by repeated multiplication in f32 as ggml does, so
/// results agree to the last bits.
///
/// Each rotated value is one product plus one fused multiply-add, `x0·cos - x1·sin` as
/// `fma(x0, cos, -(x1·sin))` and `x0·sin + x1·cos` as `fma(x0, sin, x1·cos)`: the contraction
/// the C compiler applies to ggml's CPU RoPE when FMA is enabled (its x86 builds), which
/// makes the results bit-identical with llama.cpp's.
pub fn rope(
    x: &mut [f32],
    head_dim: usize,
    positions: &[u32],
    rope: &Rope,
    factors: Option<&[f32]>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: FMA was just detected.
        return unsafe { rope_fma(x, head_dim, positions, rope, factors) };
    }
    rope_body(x, head_dim, positions, rope, factors)
}

/// [`rope`] where `mul_add` is one instruction rather than a library call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn rope_fma(
    x: &mut [f32],
    head_dim: usize,
    positions: &[u32],
    rope: &Rope,
    factors: Option<&[f32]>,
) {
    rope_body(x, head_dim, positions, rope, factors)
}

/// cos and sin of pair `i`'s angle for the unscaled angle `theta` (ggml's `rope_yarn`), each
/// times `mscale` ([`Rope::magnitude`]).
#[inline(always)]
pub fn yarn_cos_sin(theta: f32, i: usize, ff: f32, r: &Rope, mscale: f32) -> (f32, f32) {
    let theta_extrap = theta / ff;
    let theta_interp = r.freq_scale * theta_extrap;
    let mut angle = theta_interp;
    if r.ext_factor != 0.0 {
        let [low, high] = r.corr_dims;
        let y = (i as f32 - low) / (high - low).max(0.001);
        let ramp_mix = (1.0 - y.clamp(0.0, 1.0)) * r.ext_factor;
        angle = theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix);
    }
    (angle.cos() * mscale, angle.sin() * mscale)
}

#[inline(always)]
fn rope_body(
    x: &mut [f32],
    head_dim: usize,
    positions: &[u32],
    rope: &Rope,
    factors: Option<&[f32]>,
) {
    let width = x.len() / positions.len();
    let theta_scale = rope.base.powf(-2.0 / head_dim as f32);
    let half = head_dim / 2;
    let mscale = rope.magnitude();
    let mut cos_sin = vec![(0f32, 0f32); half];
    for (row, &pos) in x.chunks_exact_mut(width).zip(positions) {
        let mut theta = pos as f32;
        for (i, cs) in cos_sin.iter_mut().enumerate() {
            let ff = factors.map_or(1.0, |f| f[i]);
            *cs = yarn_cos_sin(theta, i, ff, rope, mscale);
            theta *= theta_scale;
        }
        for head in row.chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in cos_sin.iter().enumerate() {
                let (a, b) = match rope.mode {
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                    RopeMode::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0.mul_add(c, -(x1 * s));
                head[b] = x0.mul_add(s, x1 * c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_preserves_pair_norms_and_position_zero_is_identity() {
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 2.0).collect();
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let mut x = orig.clone();
            rope(&mut x, 8, &[0, 0], &Rope::plain(mode, 10000.0), None);
            assert_eq!(x, orig);
            let mut x = orig.clone();
            rope(&mut x, 8, &[5, 9], &Rope::plain(mode, 10000.0), None);
            assert_ne!(x, orig);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }

    #[test]
    fn matches_f64_angle_formula() {
        let mut x = vec![1.0f32, 0.0, 0.0, 0.0];
        rope(&mut x, 4, &[3], &Rope::plain(RopeMode::Normal, 100.0), None);
        let t0 = 3.0f64;
        assert!((x[0] as f64 - t0.cos()).abs() < 1e-6);
        assert!((x[1] as f64 - t0.sin()).abs() < 1e-6);
        let mut x = vec![0.0f32, 1.0, 0.0, 0.0];
        rope(&mut x, 4, &[3], &Rope::plain(RopeMode::Neox, 100.0), None);
        let t1 = 3.0 * 100f64.powf(-0.5);
        assert!((x[1] as f64 - t1.cos()).abs() < 1e-6);
        assert!((x[3] as f64 - t1.sin()).abs() < 1e-6);
    }

    /// Frequency factors and YaRN against ggml's formulas in f64.
    #[test]
    fn factors_and_yarn_match_f64_formulas() {
        let (hd, base, pos) = (16usize, 10000f64, 1234u32);
        let factors: Vec<f32> = (0..hd / 2).map(|i| 1.0 + i as f32 * 0.5).collect();
        let r = Rope {
            mode: RopeMode::Neox,
            base: base as f32,
            freq_scale: 0.25,
            ext_factor: 1.0,
            attn_factor: 0.9,
            corr_dims: [2.0, 5.0],
        };
        let orig: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut x = orig.clone();
        rope(&mut x, hd, &[pos], &r, Some(&factors));
        let mscale = 0.9 * (1.0 + 0.1 * 4f64.ln());
        for i in 0..hd / 2 {
            let extrap = pos as f64 * base.powf(-2.0 * i as f64 / hd as f64) / factors[i] as f64;
            let interp = 0.25 * extrap;
            let y = (i as f64 - 2.0) / 3.0;
            let mix = 1.0 - y.clamp(0.0, 1.0);
            let theta = interp * (1.0 - mix) + extrap * mix;
            let (x0, x1) = (orig[i] as f64, orig[i + hd / 2] as f64);
            let (c, s) = (theta.cos() * mscale, theta.sin() * mscale);
            assert!((x[i] as f64 - (x0 * c - x1 * s)).abs() < 1e-3, "pair {i}");
            assert!(
                (x[i + hd / 2] as f64 - (x0 * s + x1 * c)).abs() < 1e-3,
                "pair {i}"
            );
        }
    }
}
