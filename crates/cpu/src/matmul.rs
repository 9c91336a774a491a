//! `out = x · Wᵀ` for a ggml weight `W` of `rows` rows of `cols` elements.
//!
//! This is the reference path: each weight row is dequantized once per call and dotted with
//! every activation row in f32. It is exact up to f32 summation order and is what the fast
//! quantized kernels are checked against.

use ferrolm_gguf::GgmlType;
use rayon::prelude::*;

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

/// Output rows handed to one task: amortises the row dequantization over enough work.
const ROWS_PER_TASK: usize = 16;

/// The format llama.cpp converts activations to before a dot product with `ty` weights.
pub fn activation_type(ty: GgmlType) -> GgmlType {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2K | Q3K | Q4K | Q5K | Q6K => Q8K,
        other => other,
    }
}

/// `x` as the weight's partner format sees it: quantized and dequantized back. Matching
/// llama.cpp's activation rounding keeps our logits within its own noise.
fn round_activations(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let act = activation_type(ty);
    let q = ferrolm_quant::quantize_to_vec(act, x).expect("activation rows are whole blocks");
    ferrolm_quant::dequantize_to_vec(act, &q, x.len()).expect("sizes match")
}

/// `out[t][r] = Σ_c x[t][c] · W[r][c]` for `n = x.len() / cols` tokens.
pub fn matmul(w: &WeightRef, x: &[f32], out: &mut [f32]) {
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
    for r in 0..w.rows {
        for t in 0..n {
            out[t * w.rows + r] = out_t[r * n + t];
        }
    }
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
