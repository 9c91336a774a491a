//! Quantize -> dequantize -> quantize is a fixed point, and bad lengths are errors, not panics.

mod common;

use common::FLOAT_AND_LEGACY;
use ferrolm_quant::{
    dequantize, dequantize_to_vec, quantize, quantize_to_vec, BlockQ8_1, GgmlType, QuantError,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

/// Gaussian blocks at magnitudes from 1e-3 to 1e3, so scales cover a wide f16 range.
fn varied_data(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut x = Vec::with_capacity(n);
    while x.len() < n {
        let scale = 10f32.powf(rng.gen_range(-3.0..3.0));
        for _ in 0..32 {
            let v: f32 = StandardNormal.sample(&mut rng);
            x.push(v * scale);
        }
    }
    x.truncate(n);
    x
}

fn first_bad_block(ty: GgmlType, a: &[u8], b: &[u8]) -> Option<String> {
    let bb = ty.block_bytes();
    let b_ = (0..a.len() / bb).find(|&i| a[i * bb..(i + 1) * bb] != b[i * bb..(i + 1) * bb])?;
    Some(format!(
        "block {b_}: {:02x?} -> {:02x?}",
        &a[b_ * bb..(b_ + 1) * bb],
        &b[b_ * bb..(b_ + 1) * bb]
    ))
}

#[test]
fn requantizing_dequantized_values_is_a_fixed_point() {
    let x = varied_data(32 * 1024, 7);
    for ty in FLOAT_AND_LEGACY {
        let n = x.len();
        let q1 = quantize_to_vec(ty, &x).unwrap();
        let y1 = dequantize_to_vec(ty, &q1, n).unwrap();
        let q2 = quantize_to_vec(ty, &y1).unwrap();
        let y2 = dequantize_to_vec(ty, &q2, n).unwrap();
        let q3 = quantize_to_vec(ty, &y2).unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert!(
            bits(&y1) == bits(&y2),
            "{ty}: values moved on requantization"
        );
        if let Some(e) = first_bad_block(ty, &q2, &q3) {
            panic!("{ty}: not a fixed point after one round, {e}");
        }
        // Q8_1's s is computed from the unrounded scale, so the first round may move it by
        // one f16 step; every other byte of every format is stable from the start.
        if ty != GgmlType::Q8_1 {
            if let Some(e) = first_bad_block(ty, &q1, &q2) {
                panic!("{ty}: bytes changed on requantization, {e}");
            }
        }
    }
}

#[test]
fn q8_1_sum_is_scale_times_code_sum() {
    let x = varied_data(32 * 256, 8);
    let q = quantize_to_vec(GgmlType::Q8_1, &x).unwrap();
    for b in bytemuck::cast_slice::<u8, BlockQ8_1>(&q) {
        let sum: i32 = b.codes().iter().map(|&c| i32::from(c)).sum();
        let expected = b.d() * sum as f32;
        // s and d are each rounded to f16 from the same f32 scale: relative error 2^-11, or
        // absolute 2^-25 in f16's subnormal range (doubled here for margin).
        let f16_err = |v: f32| (v.abs() / 1024.0).max(2f32.powi(-24));
        let tol = sum.unsigned_abs() as f32 * f16_err(b.d()) + f16_err(b.s());
        assert!(
            (b.s() - expected).abs() <= tol,
            "s {} vs d * sum = {expected}",
            b.s()
        );
    }
}

#[test]
fn length_errors_are_reported_not_panicked() {
    for ty in FLOAT_AND_LEGACY {
        let (be, bb) = ty.block_geometry();
        let elems = 4 * be;
        let x = vec![1.0f32; elems];
        let mut bytes = vec![0u8; 4 * bb];
        let mut y = vec![0.0f32; elems];

        let short = || QuantError::SizeMismatch {
            ty,
            elems,
            expected: 4 * bb,
            got: 4 * bb - 1,
        };
        assert_eq!(quantize(ty, &x, &mut bytes[1..]), Err(short()));
        assert_eq!(dequantize(ty, &bytes[1..], &mut y), Err(short()));
        let long = QuantError::SizeMismatch {
            ty,
            elems,
            expected: 4 * bb,
            got: 5 * bb,
        };
        assert_eq!(dequantize(ty, &vec![0u8; 5 * bb], &mut y), Err(long));

        if be > 1 {
            let partial = || QuantError::PartialBlock {
                ty,
                elems: elems - 1,
                block: be,
            };
            assert_eq!(quantize(ty, &x[1..], &mut bytes), Err(partial()));
            assert_eq!(quantize_to_vec(ty, &x[1..]), Err(partial()));
            assert_eq!(dequantize(ty, &bytes, &mut y[1..]), Err(partial()));
            assert_eq!(dequantize_to_vec(ty, &bytes, elems - 1), Err(partial()));
        }
        // The buffers are untouched by failed calls and still work.
        quantize(ty, &x, &mut bytes).unwrap();
        dequantize(ty, &bytes, &mut y).unwrap();
    }
}
