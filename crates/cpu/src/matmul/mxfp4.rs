//! MXFP4 weights (gpt-oss's experts) times Q8_0 activations, in llama.cpp's x86 arithmetic.
//!
//! llama.cpp repacks MXFP4 weights on x86 and multiplies them with its `gemv`/`gemm` kernels
//! for 8 interleaved rows (`ggml_gemv_mxfp4_8x8_q8_0`, `ggml_gemm_mxfp4_8x8_q8_0`); for every
//! output both take, block by block in order, the exact integer dot of the 32 doubled E2M1
//! values with the 32 activation codes, and add it as
//! `acc = fma(dot, e8m0_half(e) · d_x, acc)`. This module does the same per output, so for the
//! same Q8_0 activation blocks its results are bit-identical with llama.cpp's. The activation
//! blocks are quantized as llama.cpp's x86 build quantizes them (`BlockQ8_0::quantize_x86`,
//! rounding half to even), where the other formats here take the reference quantizer.

use super::{chunk_len, transpose_into, WeightRef};
use ferrolm_quant::{BlockMxfp4, BlockQ8_0, QK_MXFP4};
use rayon::prelude::*;

/// One token's activations as Q8_0 blocks: codes and f16-rounded scales.
struct Acts {
    codes: Vec<[i8; QK_MXFP4]>,
    d: Vec<f32>,
}

fn quantize_acts(x: &[f32]) -> Acts {
    let (codes, d) = x
        .chunks_exact(QK_MXFP4)
        .map(|c| {
            let b = BlockQ8_0::quantize_x86(c.try_into().expect("whole blocks"));
            (*b.codes(), b.d())
        })
        .unzip();
    Acts { codes, d }
}

/// `out[t][r] = Σ_c x[t][c] · W[r][c]` for an MXFP4 `w`.
pub(super) fn matmul(w: &WeightRef, x: &[f32], out: &mut [f32]) {
    assert!(w.cols.is_multiple_of(QK_MXFP4), "MXFP4: partial block");
    let n = x.len() / w.cols;
    let bpr = w.cols / QK_MXFP4;
    let acts: Vec<Acts> = x.par_chunks_exact(w.cols).map(quantize_acts).collect();
    let blocks: Vec<BlockMxfp4> = w
        .data
        .chunks_exact(size_of::<BlockMxfp4>())
        .map(|b| *bytemuck::from_bytes(b))
        .collect();
    let rows_per_task = chunk_len(w.rows, 8, 4);
    let mut out_t = vec![0f32; w.rows * n];
    out_t
        .par_chunks_mut(rows_per_task * n)
        .zip(blocks.par_chunks(rows_per_task * bpr))
        .for_each(|(o, wb)| rows(wb, bpr, &acts, o));
    transpose_into(&out_t, n, out);
}

/// `out[r][t]` for the rows of `w` (`bpr` blocks each) and every token.
fn rows(w: &[BlockMxfp4], bpr: usize, acts: &[Acts], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were just detected.
        return unsafe { rows_avx2(w, bpr, acts, out) };
    }
    rows_body(w, bpr, acts, out)
}

/// [`rows_body`] compiled for AVX2, with `mul_add` as one instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(w: &[BlockMxfp4], bpr: usize, acts: &[Acts], out: &mut [f32]) {
    rows_body(w, bpr, acts, out)
}

#[inline(always)]
fn rows_body(w: &[BlockMxfp4], bpr: usize, acts: &[Acts], out: &mut [f32]) {
    let n = acts.len();
    let mut values = vec![[0i8; QK_MXFP4]; bpr];
    let mut scales = vec![0f32; bpr];
    for (row, o) in w.chunks_exact(bpr).zip(out.chunks_exact_mut(n)) {
        for ((b, v), s) in row.iter().zip(&mut values).zip(&mut scales) {
            *v = b.values();
            *s = b.d();
        }
        for (a, ov) in acts.iter().zip(o.iter_mut()) {
            let mut acc = 0f32;
            for ((v, &dw), (x, &dx)) in values.iter().zip(&scales).zip(a.codes.iter().zip(&a.d)) {
                let dot: i32 = v
                    .iter()
                    .zip(x)
                    .map(|(&w, &x)| i32::from(w) * i32::from(x))
                    .sum();
                acc = (dot as f32).mul_add(dw * dx, acc);
            }
            *ov = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolm_gguf::GgmlType;

    /// llama.cpp's per-output arithmetic, written out: the same bits as the kernel.
    #[test]
    fn block_order_fma_is_llama_cpp_arithmetic() {
        let (rows, cols, n) = (16, 128, 3);
        let val = |i: usize| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 3.0;
        let wf: Vec<f32> = (0..rows * cols).map(val).collect();
        let x: Vec<f32> = (0..n * cols).map(|i| val(i + 17)).collect();
        let data = ferrolm_quant::quantize_to_vec(GgmlType::Mxfp4, &wf).unwrap();
        let w = WeightRef {
            ty: GgmlType::Mxfp4,
            data: &data,
            rows,
            cols,
        };
        let mut out = vec![0f32; n * rows];
        matmul(&w, &x, &mut out);
        let blocks: &[BlockMxfp4] = bytemuck::cast_slice(&data);
        for t in 0..n {
            let a = quantize_acts(&x[t * cols..(t + 1) * cols]);
            for r in 0..rows {
                let mut acc = 0f32;
                for b in 0..cols / 32 {
                    let blk = &blocks[r * cols / 32 + b];
                    let dot: i32 = (0..32)
                        .map(|i| i32::from(blk.values()[i]) * i32::from(a.codes[b][i]))
                        .sum();
                    acc = (dot as f32).mul_add(blk.d() * a.d[b], acc);
                }
                assert_eq!(out[t * rows + r].to_bits(), acc.to_bits(), "t {t} r {r}");
            }
        }
        // And it is the product of the dequantized operands up to f32 rounding.
        let mut reference = vec![0f32; n * rows];
        super::super::matmul_reference(&w, &x, &mut reference);
        for (a, b) in out.iter().zip(&reference) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}
