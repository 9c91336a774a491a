//! The Walsh-Hadamard rotation llama.cpp applies around a quantized KV cache (its
//! `attn_rot_k`/`attn_rot_v`, PR #21038): with a quantized K, q and k are rotated before k is
//! stored, so that q·k is unchanged but k's outliers are spread over the block before it is
//! quantized; with a quantized V, v is rotated before it is stored and the attention output
//! rotated back (the rotation is its own inverse). Only for heads whose size is a multiple of 64
//! (`ggml_is_quantized(type) && head_dim % 64 == 0`).
//!
//! Computed as ggml's CPU computes it (`ggml_compute_forward_fwht`, the mul_mat hinted
//! `GGML_HINT_SRC0_IS_HADAMARD`): each chunk of `n` elements scaled by `1/sqrt(n)` first, then
//! the butterflies `(u, v) → (u + v, u - v)` over strides 1, 2, 4, … `n/2` (Sylvester order,
//! the matrix `ggml_gen_hadamard` builds). Every step is one f32 rounding in ggml's order, so
//! the result is bit-identical.

/// The size of K's rotation for heads of `head_dim`: the largest power of two from 64 that
/// divides it (llama.cpp's `build_input_k_rot`); `None` when 64 does not.
pub fn k_rotation(head_dim: usize) -> Option<usize> {
    if head_dim == 0 || !head_dim.is_multiple_of(64) {
        return None;
    }
    let mut n = 64;
    while head_dim.is_multiple_of(2 * n) {
        n *= 2;
    }
    Some(n)
}

/// The size of V's rotation: 64 (llama.cpp found the smallest best for V), when it divides
/// `head_dim`.
pub fn v_rotation(head_dim: usize) -> Option<usize> {
    (head_dim > 0 && head_dim.is_multiple_of(64)).then_some(64)
}

/// Rotates each consecutive chunk of `n` elements of `x` in place (`x.len()` a multiple of `n`,
/// `n` a power of two).
pub fn rotate(x: &mut [f32], n: usize) {
    debug_assert!(n.is_power_of_two() && x.len().is_multiple_of(n));
    let scale = 1.0 / (n as f32).sqrt();
    for chunk in x.chunks_exact_mut(n) {
        for v in chunk.iter_mut() {
            *v *= scale;
        }
        let mut len = 1;
        while len < n {
            for pair in chunk.chunks_exact_mut(2 * len) {
                let (lo, hi) = pair.split_at_mut(len);
                for (u, v) in lo.iter_mut().zip(hi) {
                    let (a, b) = (*u, *v);
                    *u = a + b;
                    *v = a - b;
                }
            }
            len *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rotate` is the orthonormal Sylvester matrix `H[i][j] = (-1)^popcount(i & j) / sqrt(n)`
    /// (ggml_gen_hadamard's), and its own inverse.
    #[test]
    fn rotation_is_sylvesters_matrix_and_self_inverse() {
        for n in [64usize, 128] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 29) as f32 - 14.0) / 7.0)
                .collect();
            let mut y = x.clone();
            rotate(&mut y, n);
            for (i, &yi) in y.iter().enumerate() {
                let want: f64 = (0..n)
                    .map(|j| {
                        let s = if (i & j).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        s * f64::from(x[j])
                    })
                    .sum::<f64>()
                    / (n as f64).sqrt();
                assert!((f64::from(yi) - want).abs() < 1e-5, "n {n} row {i}");
            }
            rotate(&mut y, n);
            for (a, b) in y.iter().zip(&x) {
                assert!((a - b).abs() < 1e-5);
            }
        }
        assert_eq!(k_rotation(64), Some(64));
        assert_eq!(k_rotation(128), Some(128));
        assert_eq!(k_rotation(192), Some(64));
        assert_eq!(k_rotation(96), None);
        assert_eq!(v_rotation(128), Some(64));
        assert_eq!(v_rotation(32), None);
    }
}
