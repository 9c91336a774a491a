//! Every implementation of every function here against the scalar code it replaced, and the
//! Q8_0/Q8_1/Q8_K quantizers against the pre-vectorization ones, byte for byte.

use super::*;
use crate::float::f32_to_f16_bits;
use crate::{BlockQ8K, BlockQ8_0, BlockQ8_1, LegacyBlock, SuperBlock};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

/// The scalar code as it was before vectorizing, verbatim.
mod reference {
    use super::MAGIC;

    pub fn absmax(x: &[f32]) -> f32 {
        x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
    }

    pub fn first_absmax(x: &[f32]) -> f32 {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        max
    }

    pub fn round_away(v: f32) -> i8 {
        v.round() as i8
    }

    pub fn round_even(v: f32) -> i8 {
        v.round_ties_even() as i8
    }

    pub fn nearest(v: f32) -> i8 {
        (((v + MAGIC) - MAGIC) as i32).min(127) as i8
    }

    /// Q8_0 and Q8_1 share this: (d, codes).
    pub fn q8_legacy(x: &[f32; 32]) -> (f32, [i8; 32]) {
        let d = absmax(x) / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        (d, std::array::from_fn(|j| round_away(x[j] * id)))
    }

    /// Q8_K: (d, codes, bsums), or None for the all-zero block.
    #[allow(clippy::type_complexity)]
    pub fn q8_k(x: &[f32; 256]) -> Option<(f32, [i8; 256], [i16; 16])> {
        let max = first_absmax(x);
        if max.abs() == 0.0 {
            return None;
        }
        let iscale = -127.0 / max;
        let qs: [i8; 256] = std::array::from_fn(|i| nearest(iscale * x[i]));
        let bsums =
            std::array::from_fn(|j| qs[16 * j..16 * j + 16].iter().map(|&q| i16::from(q)).sum());
        Some((1.0 / iscale, qs, bsums))
    }
}

/// One implementation of the module's functions, for the sizes the formats use.
struct Kernels {
    name: &'static str,
    absmax32: fn(&[f32; 32]) -> f32,
    absmax256: fn(&[f32; 256]) -> f32,
    first_absmax: fn(&[f32; 256]) -> f32,
    round_away: fn(&[f32; 32], f32, &mut [i8; 32]) -> i32,
    round_even: fn(&[f32; 32], f32, &mut [i8; 32]) -> i32,
    nearest: fn(&[f32; 256], f32, &mut [i8; 256]),
    sums16: fn(&[i8; 256]) -> [i16; 16],
}

/// Portable always, AVX2 where this CPU has it, and the dispatching entry points.
fn kernels() -> Vec<Kernels> {
    let mut all = vec![
        Kernels {
            name: "portable",
            absmax32: portable::absmax,
            absmax256: portable::absmax,
            first_absmax: portable::first_absmax,
            round_away: portable::round_away,
            round_even: portable::round_even,
            nearest: portable::nearest,
            sums16: portable::sums16,
        },
        Kernels {
            name: "dispatch",
            absmax32: absmax,
            absmax256: absmax,
            first_absmax,
            round_away,
            round_even,
            nearest,
            sums16,
        },
    ];
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY (each closure): AVX2 was detected on this CPU.
        all.push(Kernels {
            name: "avx2",
            absmax32: |x| unsafe { avx2::absmax(x) },
            absmax256: |x| unsafe { avx2::absmax(x) },
            first_absmax: |x| unsafe { avx2::first_absmax(x) },
            round_away: |x, s, o| unsafe { avx2::round_away(x, s, o) },
            round_even: |x, s, o| unsafe { avx2::round_even(x, s, o) },
            nearest: |x, s, o| unsafe { avx2::nearest(x, s, o) },
            sums16: |q| unsafe { avx2::sums16(q) },
        });
    }
    all
}

/// Finite values chosen to break approximations: ties, their neighbours, the top of f32's
/// precision, zeros of both signs, subnormals and extremes.
fn adversarial() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        0.5,
        0.49999997,
        0.50000006,
        1.5,
        1.4999999,
        2.5,
        2.4999998,
        2.5000002,
        126.5,
        127.49999,
        127.5,
        128.5,
        8388607.5,
        8388608.0,
        8388609.0,
        4194304.5,
        16777217.0,
        f32::MIN_POSITIVE,
        1e-40,
        1e-45,
        3.7e-37,
        f32::MAX,
        f32::EPSILON,
        1.0 - f32::EPSILON / 2.0,
    ];
    for k in -130..=130 {
        v.push(k as f32 + 0.5);
    }
    let neighbours: Vec<f32> = v
        .iter()
        .flat_map(|&x| {
            [
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits().max(1) - 1),
            ]
        })
        .filter(|x| x.is_finite())
        .collect();
    v.extend(neighbours);
    let negated: Vec<f32> = v.iter().map(|&x| -x).collect();
    v.extend(negated);
    v
}

/// Blocks of `n` values: gaussian at magnitudes across f32's range; ties exactly on code
/// boundaries (a power-of-two scale times k + 0.5, with the absmax that gives that scale);
/// adversarial values scaled by powers of two; and equal magnitudes of both signs.
fn blocks(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for _ in 0..3000 {
        let scale = 10f32.powf(rng.gen_range(-44.0..38.0));
        out.push(
            (0..n)
                .map(|_| rng.sample::<f32, _>(StandardNormal) * scale)
                .collect(),
        );
    }
    for e in [-140, -130, -126, -100, -20, -7, 0, 3, 20, 100, 120] {
        let p = 2f32.powi(e);
        for _ in 0..40 {
            let mut b: Vec<f32> = (0..n)
                .map(|_| (rng.gen_range(-127..=126) as f32 + 0.5) * p)
                .collect();
            let at = rng.gen_range(0..n);
            b[at] = if rng.gen() { 127.0 * p } else { -127.0 * p };
            out.push(b);
        }
    }
    let adv = adversarial();
    for e in [-149, -140, -126, -60, -24, -1, 0, 1, 24, 60, 100, 127] {
        let p = 2f32.powi(e);
        for _ in 0..40 {
            out.push(
                (0..n)
                    .map(|_| adv[rng.gen_range(0..adv.len())] * p)
                    .collect(),
            );
        }
    }
    for _ in 0..500 {
        // A few equal magnitudes of mixed sign on top of smaller noise: the first must win.
        let m: f32 = rng.gen_range(0.1..10.0);
        let mut b: Vec<f32> = (0..n).map(|_| rng.gen_range(-0.09..0.09)).collect();
        for _ in 0..rng.gen_range(1..4) {
            let at = rng.gen_range(0..n);
            b[at] = if rng.gen() { m } else { -m };
        }
        out.push(b);
    }
    out.push(vec![0.0; n]);
    out.push(vec![-0.0; n]);
    out
}

#[test]
fn maxima_equal_the_scalar_scans() {
    for k in kernels() {
        for x in blocks(256, 1) {
            let x: &[f32; 256] = x.as_slice().try_into().unwrap();
            let first = (k.first_absmax)(x);
            let want = reference::first_absmax(x);
            assert_eq!(first.to_bits(), want.to_bits(), "{}: {x:?}", k.name);
            assert_eq!((k.absmax256)(x), reference::absmax(x), "{}", k.name);
            let x32: &[f32; 32] = x[..32].try_into().unwrap();
            assert_eq!((k.absmax32)(x32), reference::absmax(x32), "{}", k.name);
        }
    }
}

#[test]
fn codes_equal_the_scalar_rounding() {
    for k in kernels() {
        for x in blocks(256, 2) {
            let x: &[f32; 256] = x.as_slice().try_into().unwrap();
            // The scales the formats derive from this block, and some arbitrary ones.
            let d = reference::absmax(x) / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            let iscale = -127.0 / reference::first_absmax(x);
            for s in [id, iscale, 1.0, -1.0, 0.0, f32::INFINITY] {
                for x32 in x.chunks_exact(32) {
                    let x32: &[f32; 32] = x32.try_into().unwrap();
                    let mut q = [0i8; 32];
                    let sum = (k.round_away)(x32, s, &mut q);
                    let want: [i8; 32] = std::array::from_fn(|i| reference::round_away(x32[i] * s));
                    assert_eq!(q, want, "{} round_away scale {s:e}: {x32:?}", k.name);
                    assert_eq!(sum, want.iter().map(|&q| i32::from(q)).sum::<i32>());
                    let sum = (k.round_even)(x32, s, &mut q);
                    let want: [i8; 32] = std::array::from_fn(|i| reference::round_even(x32[i] * s));
                    assert_eq!(q, want, "{} round_even scale {s:e}: {x32:?}", k.name);
                    assert_eq!(sum, want.iter().map(|&q| i32::from(q)).sum::<i32>());
                }
                let mut q = [0i8; 256];
                (k.nearest)(x, s, &mut q);
                let want: [i8; 256] = std::array::from_fn(|i| reference::nearest(s * x[i]));
                assert_eq!(q, want, "{} nearest scale {s:e}: {x:?}", k.name);
                let sums: [i16; 16] =
                    std::array::from_fn(|j| q[16 * j..][..16].iter().map(|&v| i16::from(v)).sum());
                assert_eq!((k.sums16)(&q), sums, "{}", k.name);
            }
        }
    }
}

/// Runs `round_away` and `nearest` (scale 1) over the f32 bit patterns `start, start + step,
/// ..`, and compares with the scalar forms.
fn sweep(k: &Kernels, step: u64) {
    let mut bits = 0u64;
    while bits < 1 << 32 {
        let x: [f32; 256] =
            std::array::from_fn(|i| f32::from_bits((bits + i as u64 * step) as u32));
        let mut q = [0i8; 256];
        (k.nearest)(&x, 1.0, &mut q);
        for (i, (&q, &v)) in q.iter().zip(&x).enumerate() {
            assert_eq!(q, reference::nearest(v), "{} nearest({v:e}) at {i}", k.name);
        }
        for c in x.chunks_exact(32) {
            let c: &[f32; 32] = c.try_into().unwrap();
            let mut q = [0i8; 32];
            (k.round_away)(c, 1.0, &mut q);
            for (&q, &v) in q.iter().zip(c) {
                assert_eq!(q, reference::round_away(v), "{} round_away({v:e})", k.name);
            }
            (k.round_even)(c, 1.0, &mut q);
            for (&q, &v) in q.iter().zip(c) {
                assert_eq!(q, reference::round_even(v), "{} round_even({v:e})", k.name);
            }
        }
        bits += 256 * step;
    }
}

#[test]
fn rounding_matches_on_a_sweep_of_all_f32_bit_patterns() {
    for k in kernels() {
        sweep(&k, 4099);
    }
}

/// Every one of the 2^32 bit patterns: `cargo test --release -p ferrolm-quant --lib --
/// --ignored every_f32` (a few minutes).
#[test]
#[ignore]
fn rounding_matches_on_every_f32() {
    for k in kernels() {
        sweep(&k, 1);
    }
}

#[test]
fn q8_0_and_q8_1_blocks_equal_the_scalar_quantizer() {
    for x in blocks(32, 3) {
        let x: &[f32; 32] = x.as_slice().try_into().unwrap();
        let (d, qs) = reference::q8_legacy(x);
        let (d16, qs) = (
            f32_to_f16_bits(d).to_le_bytes(),
            bytemuck::cast::<_, [u8; 32]>(qs),
        );
        assert_eq!(BlockQ8_0::quantize(x), BlockQ8_0 { d: d16, qs }, "{x:?}");
        let sum: i32 = qs.iter().map(|&q| i32::from(q as i8)).sum();
        let s = f32_to_f16_bits(sum as f32 * d).to_le_bytes();
        assert_eq!(BlockQ8_1::quantize(x), BlockQ8_1 { d: d16, s, qs }, "{x:?}");
    }
}

/// ggml's x86 `quantize_row_q8_0`/`_q8_1`, written out: `id = 127 / absmax`, codes rounded
/// half to even, `s` from the codes' sum.
#[test]
fn x86_q8_0_and_q8_1_blocks_equal_ggml_x86_quantizer() {
    for x in blocks(32, 5) {
        let x: &[f32; 32] = x.as_slice().try_into().unwrap();
        let amax = reference::absmax(x);
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let qs: [i8; 32] = std::array::from_fn(|j| reference::round_even(x[j] * id));
        let d16 = f32_to_f16_bits(amax / 127.0).to_le_bytes();
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        let qs = bytemuck::cast::<_, [u8; 32]>(qs);
        assert_eq!(
            BlockQ8_0::quantize_x86(x),
            BlockQ8_0 { d: d16, qs },
            "{x:?}"
        );
        let s = f32_to_f16_bits(amax / 127.0 * sum as f32).to_le_bytes();
        assert_eq!(
            BlockQ8_1::quantize_x86(x),
            BlockQ8_1 { d: d16, s, qs },
            "{x:?}"
        );
    }
}

#[test]
fn q8_k_blocks_equal_the_scalar_quantizer() {
    for x in blocks(256, 4) {
        let x: &[f32; 256] = x.as_slice().try_into().unwrap();
        let got = BlockQ8K::quantize(x);
        let want = match reference::q8_k(x) {
            Some((d, qs, bsums)) => BlockQ8K { d, qs, bsums },
            None => bytemuck::Zeroable::zeroed(),
        };
        assert_eq!(bytemuck::bytes_of(&got), bytemuck::bytes_of(&want), "{x:?}");
    }
}
