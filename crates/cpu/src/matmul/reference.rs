//! The reference path: each weight row is dequantized once per call and dotted with every
//! activation row in f32, after rounding the activations through the weight's partner format
//! exactly as llama.cpp does. Slow, simple, and the oracle the fast kernels are tested against.

use super::{activation_type, WeightRef};
use ferrolm_gguf::GgmlType;
use rayon::prelude::*;

/// Output rows handed to one task: amortises the row dequantization over enough work.
const ROWS_PER_TASK: usize = 16;

/// `x` as the weight's partner format sees it: quantized and dequantized back. Matching
/// llama.cpp's activation rounding keeps our logits within its own noise.
pub(super) fn round_activations(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    super::act::round_trip(activation_type(ty), x)
}

/// `out[t][r] = Σ_c x[t][c] · W[r][c]`, the reference way (see the module doc).
pub fn matmul_reference(w: &WeightRef, x: &[f32], out: &mut [f32]) {
    let rounded;
    let x = if activation_type(w.ty) == GgmlType::F32 {
        x
    } else {
        rounded = round_activations(w.ty, x);
        &rounded
    };
    let n = x.len() / w.cols;
    assert_eq!(out.len(), n * w.rows);
    // Compute transposed ([row][token]) so each task owns a contiguous block of output.
    let mut out_t = vec![0f32; w.rows * n];
    out_t
        .par_chunks_mut(ROWS_PER_TASK * n)
        .enumerate()
        .for_each(|(chunk, o)| {
            let mut row = vec![0f32; w.cols];
            for (i, o_row) in o.chunks_exact_mut(n).enumerate() {
                w.dequantize_row(chunk * ROWS_PER_TASK + i, &mut row);
                for (t, ov) in o_row.iter_mut().enumerate() {
                    *ov = dot(&row, &x[t * w.cols..(t + 1) * w.cols]);
                }
            }
        });
    super::transpose_into(&out_t, n, out);
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise without reassociation flags.
    let mut acc = [0f32; 8];
    let (ac, ar) = a.split_at(a.len() / 8 * 8);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}
