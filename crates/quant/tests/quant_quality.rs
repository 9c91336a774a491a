//! Quantization error on Gaussian data: against the oracle quantizer's error, and against what
//! a uniform quantizer with each block's step should give.

mod common;

use common::{load_all, rmse};
use ferrolm_quant::{
    codec, dequantize_to_vec, quantize_to_vec, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1,
    BlockQ8_0, BlockQ8_1, GgmlType, LegacyBlock,
};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

#[test]
fn gaussian_rmse_within_2_percent_of_oracle() {
    let mut checked = 0;
    for f in load_all() {
        if codec(f.ty).is_err() || f.gaussian_elems == 0 {
            continue;
        }
        let n = f.gaussian_elems;
        let bytes = n / f.ty.block_elems() * f.ty.block_bytes();
        let x = &f.qin[..n];
        let ours = dequantize_to_vec(f.ty, &quantize_to_vec(f.ty, x).unwrap(), n).unwrap();
        let oracle = dequantize_to_vec(f.ty, &f.qout[..bytes], n).unwrap();
        let (r_ours, r_oracle) = (rmse(x, &ours), rmse(x, &oracle));
        eprintln!("{}: RMSE ours {r_ours:.6}, oracle {r_oracle:.6}", f.ty);
        assert!(
            r_ours <= r_oracle * 1.02,
            "{}: RMSE {r_ours} vs oracle {r_oracle}",
            f.ty
        );
        checked += 1;
    }
    assert!(checked >= 9, "only {checked} types checked");
}

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

/// Quantizes N(0, 1) samples as `B` and checks every element's error against the bound its
/// block's step allows; returns (RMSE, RMSE a uniform rounding error of that step would give).
fn check_blocks<B: LegacyBlock>(x: &[f32], step: impl Fn(&B) -> f32, clipped: bool) -> (f64, f64) {
    let (mut err2, mut step2) = (0.0f64, 0.0f64);
    for chunk in x.chunks_exact(32) {
        let x: &[f32; 32] = chunk.try_into().unwrap();
        let block = B::quantize(x);
        let mut y = [0.0; 32];
        block.dequantize(&mut y);
        let s = step(&block);
        // Codes are chosen with the f32 scale but read back with its f16 rounding (relative
        // error <= 2^-11, times a code of at most 127), and offsets also round to f16.
        let slack = s * 127.0 / 2048.0 + x.iter().fold(0f32, |m, v| m.max(v.abs())) / 2048.0;
        // Symmetric 4/5-bit codes lose their top code: the far extreme may be off a whole step.
        let bound = if clipped { s } else { s / 2.0 } + slack;
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= bound, "{}: {a} -> {b}, step {s}", B::TYPE);
            err2 += f64::from(a - b).powi(2);
        }
        step2 += f64::from(s).powi(2) * 32.0;
    }
    let n = x.len() as f64;
    ((err2 / n).sqrt(), (step2 / n / 12.0).sqrt())
}

#[test]
fn gaussian_error_matches_uniform_quantizer_theory() {
    let x = gaussian(32 * 2048, 0x5eed);
    let results = [
        check_blocks::<BlockQ4_0>(&x, |b| b.d().abs(), true),
        check_blocks::<BlockQ4_1>(&x, |b| b.d(), false),
        check_blocks::<BlockQ5_0>(&x, |b| b.d().abs(), true),
        check_blocks::<BlockQ5_1>(&x, |b| b.d(), false),
        check_blocks::<BlockQ8_0>(&x, |b| b.d(), false),
        check_blocks::<BlockQ8_1>(&x, |b| b.d(), false),
    ];
    let names = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1"];
    for (name, (r, theory)) in names.iter().zip(results) {
        eprintln!("{name}: RMSE {r:.6}, uniform-noise model {theory:.6}");
        // Rounding to a grid much finer than the data's spread leaves errors close to
        // uniform on [-step/2, step/2] (RMSE step/sqrt(12)). The clipped top code of the
        // symmetric formats adds a little; nothing should come close to 15% either way.
        assert!(
            (0.85..=1.15).contains(&(r / theory)),
            "{name}: RMSE {r} vs {theory}"
        );
    }
    // One more bit halves the step (d = range/15 vs /31, max/8 vs max/16), and so the error.
    for (hi, lo) in [(0, 2), (1, 3)] {
        let ratio = results[hi].0 / results[lo].0;
        assert!(
            (1.8..=2.3).contains(&ratio),
            "{} / {}: {ratio}",
            names[hi],
            names[lo]
        );
    }
    assert_eq!(results[4], results[5], "Q8_0 and Q8_1 share their codes");
}

#[test]
fn float_error_is_within_half_an_ulp() {
    let x = gaussian(1 << 16, 0xf10a7);
    // Relative error of round-to-nearest with p mantissa bits is at most 2^-(p+1); below
    // f16's normal range the absolute error is at most half the smallest subnormal, 2^-25.
    for (ty, rel, abs) in [
        (GgmlType::F32, 0.0, 0.0),
        (GgmlType::F16, 2f32.powi(-11), 2f32.powi(-25)),
        (GgmlType::Bf16, 2f32.powi(-8), 0.0),
    ] {
        let y = dequantize_to_vec(ty, &quantize_to_vec(ty, &x).unwrap(), x.len()).unwrap();
        for (a, b) in x.iter().zip(&y) {
            assert!(
                (a - b).abs() <= (a.abs() * rel).max(abs),
                "{ty}: {a} -> {b}"
            );
        }
        eprintln!("{ty}: RMSE {:.3e}", rmse(&x, &y));
    }
}
