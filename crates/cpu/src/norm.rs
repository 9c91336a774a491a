//! RMS normalisation and the small elementwise ops around it.

/// `out[t] = x[t] / sqrt(mean(x[t]²) + eps) * w`, for every row `t` of width `w.len()`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    assert_eq!(x.len(), out.len());
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let scale = rms_scale(xr, eps);
        for ((o, &xv), &wv) in or.iter_mut().zip(xr).zip(w) {
            *o = xv * scale * wv;
        }
    }
}

/// In-place [`rms_norm`] applied to each `w.len()`-wide group of `x` (per-head q/k norms).
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let scale = rms_scale(xr, eps);
        for (xv, &wv) in xr.iter_mut().zip(w) {
            *xv = *xv * scale * wv;
        }
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    // Accumulate in f64 like ggml's ggml_float sum, so long rows do not lose precision. ggml
    // rounds each square to f32 first; doing so too changes no tiny-golden figure but flips
    // SmolLM2's 0.097-margin EOS-first prompt (see docs/parity.md), so the squares stay exact.
    let sum: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `x[t] += b` for every row.
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        for (v, &bv) in row.iter_mut().zip(b) {
            *v += bv;
        }
    }
}

/// `acc += x`, elementwise.
pub fn add_assign(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

/// SwiGLU: `gate = silu(gate) * up`, in place in `gate`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// GeGLU: `gate = gelu(gate) * up`, in place in `gate`, with GELU's tanh form as ggml writes
/// it (`ggml_gelu_f32`): `0.5 x (1 + tanh(sqrt(2/π) x (1 + 0.044715 x²)))`.
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044715;
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh()) * u;
    }
}

/// `x *= s`, elementwise.
pub fn scale(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}

/// gpt-oss's gated activation (ggml's `swiglu_oai`), in place in `gate`: the gate clamped
/// above at `limit`, `up` to `±limit`, then `g · sigmoid(alpha · g) · (u + 1)`.
pub fn swiglu_oai(gate: &mut [f32], up: &[f32], alpha: f32, limit: f32) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(limit);
        let y = u.clamp(-limit, limit);
        *g = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
    }
}

/// Numerically stable softmax in place.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_matches_f64_definition() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.3)
            .collect();
        let w: Vec<f32> = (0..32).map(|i| 0.5 + i as f32 * 0.01).collect();
        let mut out = vec![0.0; 64];
        rms_norm(&x, &w, 1e-5, &mut out);
        for t in 0..2 {
            let row = &x[t * 32..(t + 1) * 32];
            let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 32.0;
            for i in 0..32 {
                let want = row[i] as f64 / (ms + 1e-5).sqrt() * w[i] as f64;
                assert!((out[t * 32 + i] as f64 - want).abs() < 1e-5);
            }
        }
    }

    /// ggml's `swiglu_oai` with gpt-oss's constants: the gate clamped above only, up both ways.
    #[test]
    fn swiglu_oai_clamps_as_ggml() {
        let mut g = vec![1.0f32, 9.0, -9.0, 0.5];
        let u = [2.0f32, 9.0, -9.0, -0.5];
        swiglu_oai(&mut g, &u, 1.702, 7.0);
        let f = |x: f64, y: f64| x / (1.0 + (-1.702 * x).exp()) * (y + 1.0);
        let want = [f(1.0, 2.0), f(7.0, 7.0), f(-9.0, -7.0), f(0.5, -0.5)];
        for (a, b) in g.iter().zip(want) {
            assert!(
                (*a as f64 - b).abs() < 1e-5 * b.abs().max(1.0),
                "{a} vs {b}"
            );
        }
    }

    /// GELU's tanh form against its f64 definition, at points where it differs from the erf
    /// form and from SiLU.
    #[test]
    fn geglu_is_the_tanh_gelu_times_up() {
        let xs = [-4.0f32, -1.5, -0.3, 0.0, 0.7, 2.0, 6.0];
        let up = [1.0f32, 2.0, -1.0, 3.0, 0.5, -2.0, 1.5];
        let mut g = xs.to_vec();
        geglu(&mut g, &up);
        for ((&x, &u), &got) in xs.iter().zip(&up).zip(&g) {
            let x = x as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let want = 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh()) * u as f64;
            assert!(
                (got as f64 - want).abs() < 1e-6,
                "gelu({x}) * {u}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn softmax_sums_to_one_and_survives_large_inputs() {
        let mut x = vec![1000.0, 1001.0, 999.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[0] && x[0] > x[2]);
    }
}
