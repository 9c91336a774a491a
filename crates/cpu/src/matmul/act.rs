//! Activation rows quantized once per call into the weight's partner format, laid out for the
//! kernels: codes contiguous per token, and per unit (16 or 32 elements, the weight's unit) the
//! scale `d` and `s = d · Σ codes`, the term the weight offsets multiply. For weights whose
//! codes carry a bias, `-bias · Σ codes` per unit and per 4 codes, which the kernels start
//! their integer dots from so that the bias cancels exactly.

use ferrolm_gguf::GgmlType;
use ferrolm_quant::{BlockQ8K, BlockQ8_0, SuperBlock, QK_K};
use rayon::prelude::*;

/// Below this many elements the rows are quantized on the calling thread: a rayon dispatch
/// costs more than the work.
const PARALLEL_MIN_ELEMS: usize = 1 << 15;

pub(super) struct Acts {
    pub n: usize,
    pub cols: usize,
    /// Elements per unit: the weight format's.
    pub unit: usize,
    /// `[n][cols]` codes.
    pub codes: Vec<i8>,
    /// `[n][cols / unit]` scales.
    pub d: Vec<f32>,
    /// `[n][cols / unit]`: `d · Σ codes` of the unit. Exact for Q8_0/Q8_1 (an f16 scale times
    /// a sum under 2^13 fits in f32's mantissa); one rounding for Q8_K.
    pub s: Vec<f32>,
    /// `[n][cols / unit]`: `-bias · Σ codes` of the unit (the tiled kernel's starting sums).
    pub xb: Vec<i32>,
    /// `[n][cols / 4]`: `-bias · Σ codes` of each 4 codes (the decode kernel's lane sums).
    pub xl: Vec<i32>,
    /// `[n][cols / unit]`: `Σ codes` of the unit, for Q8_K only (integer-scale formats' mins).
    pub sum: Vec<i32>,
}

impl Acts {
    /// Quantizes `x` (`[n][cols]`) to `ty` (Q8_0, Q8_1 or Q8_K), for a weight of `unit`-element
    /// units whose codes are stored `bias` above their value; `lanes` asks for `xl` too (the
    /// decode kernel's). `cols` must be a multiple of `ty`'s block.
    pub fn quantize(
        ty: GgmlType,
        unit: usize,
        bias: i32,
        lanes: bool,
        x: &[f32],
        cols: usize,
    ) -> Acts {
        let n = x.len() / cols;
        let units = cols / unit;
        let mut a = Acts {
            n,
            cols,
            unit,
            codes: vec![0; n * cols],
            d: vec![0.0; n * units],
            s: vec![0.0; n * units],
            xb: vec![0; n * units],
            xl: vec![0; n * cols / 4],
            sum: vec![0; n * units],
        };
        type Row<'a> = (
            (&'a [f32], &'a mut [i8]),
            (&'a mut [f32], &'a mut [f32], &'a mut [i32]),
        );
        let row = |(((x, codes), (d, s, sum)), (xb, xl)): (Row, (&mut [i32], &mut [i32]))| {
            quantize_row(ty, unit, x, codes, d, s, sum);
            if bias != 0 {
                for (b, c) in xb.iter_mut().zip(codes.chunks_exact(unit)) {
                    *b = -bias * c.iter().map(|&q| i32::from(q)).sum::<i32>();
                }
                if lanes {
                    for (l, c) in xl.iter_mut().zip(codes.chunks_exact(4)) {
                        *l = -bias * c.iter().map(|&q| i32::from(q)).sum::<i32>();
                    }
                }
            }
        };
        if x.len() < PARALLEL_MIN_ELEMS {
            x.chunks_exact(cols)
                .zip(a.codes.chunks_exact_mut(cols))
                .zip(
                    a.d.chunks_exact_mut(units)
                        .zip(a.s.chunks_exact_mut(units))
                        .zip(a.sum.chunks_exact_mut(units))
                        .map(|((d, s), sum)| (d, s, sum)),
                )
                .zip(
                    a.xb.chunks_exact_mut(units)
                        .zip(a.xl.chunks_exact_mut(cols / 4)),
                )
                .for_each(row);
        } else {
            x.par_chunks_exact(cols)
                .zip(a.codes.par_chunks_exact_mut(cols))
                .zip(
                    a.d.par_chunks_exact_mut(units)
                        .zip(a.s.par_chunks_exact_mut(units))
                        .zip(a.sum.par_chunks_exact_mut(units))
                        .map(|((d, s), sum)| (d, s, sum)),
                )
                .zip(
                    a.xb.par_chunks_exact_mut(units)
                        .zip(a.xl.par_chunks_exact_mut(cols / 4)),
                )
                .for_each(row);
        }
        a
    }

    pub fn units(&self) -> usize {
        self.cols / self.unit
    }

    pub fn codes(&self, t: usize) -> &[i8] {
        &self.codes[t * self.cols..][..self.cols]
    }

    pub fn d(&self, t: usize) -> &[f32] {
        &self.d[t * self.units()..][..self.units()]
    }

    pub fn s(&self, t: usize) -> &[f32] {
        &self.s[t * self.units()..][..self.units()]
    }

    pub fn xb(&self, t: usize) -> &[i32] {
        &self.xb[t * self.units()..][..self.units()]
    }

    pub fn xl(&self, t: usize) -> &[i32] {
        &self.xl[t * self.cols / 4..][..self.cols / 4]
    }

    pub fn sum(&self, t: usize) -> &[i32] {
        &self.sum[t * self.units()..][..self.units()]
    }
}

fn quantize_row(
    ty: GgmlType,
    unit: usize,
    x: &[f32],
    codes: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    sum: &mut [i32],
) {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q8_1 => legacy_row(x, codes, d, s, legacy_block),
        GgmlType::Q8K => {
            let per_unit = unit / 16;
            for ((((x, codes), d), s), sum) in x
                .chunks_exact(QK_K)
                .zip(codes.chunks_exact_mut(QK_K))
                .zip(d.chunks_exact_mut(QK_K / unit))
                .zip(s.chunks_exact_mut(QK_K / unit))
                .zip(sum.chunks_exact_mut(QK_K / unit))
            {
                let b = BlockQ8K::quantize(x.try_into().expect("a whole super-block"));
                codes.copy_from_slice(&b.qs);
                d.fill(b.d);
                for ((s, sum), sums) in s.iter_mut().zip(sum).zip(b.bsums.chunks_exact(per_unit)) {
                    *s = b.d * sums.iter().map(|&v| f32::from(v)).sum::<f32>();
                    *sum = sums.iter().map(|&v| i32::from(v)).sum();
                }
            }
        }
        other => unreachable!("{other} is not an activation format"),
    }
}

/// One Q8_0 (or Q8_1: the same codes and scale) activation block as llama.cpp's x86 CPU
/// backend quantizes it (`quantize_row_q8_0`/`_q8_1`, AVX2: `127 / absmax`, half to even):
/// (scale, codes).
pub(super) fn legacy_block(x: &[f32; 32]) -> (f32, [i8; 32]) {
    let b = BlockQ8_0::quantize_x86(x);
    (b.d(), *b.codes())
}

/// `x` rounded through the activation format `ty` (Q8_0, Q8_1 or Q8_K) and back, with the
/// quantizers [`Acts::quantize`] uses: the reference path's operands.
pub(super) fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q8_1 => x
            .chunks_exact(32)
            .flat_map(|c| {
                let (d, q) = legacy_block(c.try_into().expect("whole blocks"));
                q.map(|q| f32::from(q) * d)
            })
            .collect(),
        _ => {
            let q = ferrolm_quant::quantize_to_vec(ty, x).expect("whole blocks");
            ferrolm_quant::dequantize_to_vec(ty, &q, x.len()).expect("sizes match")
        }
    }
}

/// Q8_0 and Q8_1 rows, with units of 32 (the only unit size their weights use).
fn legacy_row(
    x: &[f32],
    codes: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    block: fn(&[f32; 32]) -> (f32, [i8; 32]),
) {
    for (((x, codes), d), s) in x
        .chunks_exact(32)
        .zip(codes.chunks_exact_mut(32))
        .zip(d)
        .zip(s)
    {
        let (scale, q) = block(x.try_into().expect("a whole block"));
        codes.copy_from_slice(&q);
        *d = scale;
        *s = scale * q.iter().map(|&v| i32::from(v)).sum::<i32>() as f32;
    }
}
