//! Fast kernels against `matmul_reference`, for every weight type, level and path.
//!
//! Metric: `|fast - ref| / Σ_c |x'_c·w'_c|` per output, with `x'`, `w'` the rounded operands
//! both paths multiply. Both are f32 sums of the same products: the reference rounds each of
//! `cols` products and sums them in 8 lanes (about cols/8 additions deep); the kernels sum
//! exact integer dots per unit and round a few times per unit. Each side's error is a sum of
//! roundings of relative size 2⁻²⁴ ≈ 6e-8 over a few hundred steps (cols ≤ 2048): the worst
//! case is ~(2048/8 + 128)·6e-8 ≈ 2.3e-5, but roundings do not all line up, and over the ~10⁵
//! outputs below we observe at most 3e-7. We assert 2e-6 (seeds are fixed, so this is
//! deterministic): seven times the largest observed, and a hundred times below the effect of a
//! single weight code off by one (`an_off_by_one_code_fails_the_tolerance`), or of an f16-rounded
//! activation sum (~5e-4), the mistake a kernel copying llama.cpp's `s` field would make.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

const TOL: f64 = 2e-6;

const QUANTIZED: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// (tokens, rows, cols): single tokens and batches; rows off the 8/16-row tiles and on them.
const SHAPES: [(usize, usize, usize); 7] = [
    (1, 37, 256),
    (3, 45, 512),
    (17, 37, 2048),
    (64, 70, 1024),
    (1, 70, 2048),
    (64, 33, 256),
    (5, 32, 768),
];

fn gaussian(rng: &mut StdRng, len: usize, sigma: f32) -> Vec<f32> {
    let normal = Normal::new(0.0, sigma).unwrap();
    (0..len).map(|_| normal.sample(rng)).collect()
}

/// Weights as a model file has them: Gaussian values through the format's own quantizer.
fn weight(rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    ferrolm_quant::quantize_to_vec(ty, &gaussian(rng, rows * cols, 0.05)).unwrap()
}

/// Activations with the awkward cases: a zero row, and an outlier channel.
fn activations(rng: &mut StdRng, n: usize, cols: usize) -> Vec<f32> {
    let mut x = gaussian(rng, n * cols, 1.0);
    for t in 0..n {
        x[t * cols + (7 * t) % cols] *= 40.0;
    }
    if n > 2 {
        x[cols..2 * cols].fill(0.0);
    }
    x
}

/// `Σ_c |x'_c · w'_c|` for every output, in f64.
fn magnitudes(w: &WeightRef, x: &[f32]) -> Vec<f64> {
    let xr = if activation_type(w.ty) == GgmlType::F32 {
        x.to_vec()
    } else {
        reference::round_activations(w.ty, x)
    };
    let n = x.len() / w.cols;
    let mut row = vec![0f32; w.cols];
    let mut mags = vec![0f64; n * w.rows];
    for r in 0..w.rows {
        w.dequantize_row(r, &mut row);
        for t in 0..n {
            let xt = &xr[t * w.cols..][..w.cols];
            mags[t * w.rows + r] = row
                .iter()
                .zip(xt)
                .map(|(&a, &b)| (a as f64 * b as f64).abs())
                .sum();
        }
    }
    mags
}

/// Largest `|got - want| / magnitude` over the outputs.
fn worst(got: &[f32], want: &[f32], mags: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .zip(mags)
        .map(|((&g, &w), &m)| {
            assert!(g.is_finite(), "non-finite output {g}");
            (g as f64 - w as f64).abs() / m.max(f64::MIN_POSITIVE)
        })
        .fold(0.0, f64::max)
}

fn paths(isa: Isa) -> Vec<Path> {
    if isa == Isa::Scalar {
        vec![Path::Auto]
    } else {
        vec![Path::Gemv, Path::Gemm, Path::Auto]
    }
}

/// Every level and path against the reference, over `SHAPES`; returns the worst ratio seen.
fn check_type(ty: GgmlType) -> f64 {
    let mut rng = StdRng::seed_from_u64(ty.id().into());
    let mut seen = 0f64;
    for &(n, rows, cols) in &SHAPES {
        let data = weight(&mut rng, ty, rows, cols);
        let w = WeightRef {
            ty,
            data: &data,
            rows,
            cols,
        };
        let x = activations(&mut rng, n, cols);
        let mut want = vec![0f32; n * rows];
        matmul_reference(&w, &x, &mut want);
        let mags = magnitudes(&w, &x);
        for isa in Isa::available() {
            for path in paths(isa) {
                let mut got = vec![f32::NAN; n * rows];
                matmul_with(isa, path, &w, &x, &mut got);
                let e = worst(&got, &want, &mags);
                assert!(
                    e <= TOL,
                    "{ty} {isa:?} {path:?} n={n} rows={rows} cols={cols}: {e:e}"
                );
                seen = seen.max(e);
            }
        }
    }
    println!(
        "{ty}: worst |fast - reference| / Σ|terms| = {seen:.2e} over {:?}",
        Isa::available()
    );
    seen
}

macro_rules! type_tests {
    ($($name:ident: $ty:expr,)*) => {$(
        #[test]
        fn $name() {
            check_type($ty);
        }
    )*};
}

type_tests! {
    q4_0_matches_reference: GgmlType::Q4_0,
    q4_1_matches_reference: GgmlType::Q4_1,
    q5_0_matches_reference: GgmlType::Q5_0,
    q5_1_matches_reference: GgmlType::Q5_1,
    q8_0_matches_reference: GgmlType::Q8_0,
    q2_k_matches_reference: GgmlType::Q2K,
    q3_k_matches_reference: GgmlType::Q3K,
    q4_k_matches_reference: GgmlType::Q4K,
    q5_k_matches_reference: GgmlType::Q5K,
    q6_k_matches_reference: GgmlType::Q6K,
    f32_matches_reference: GgmlType::F32,
    f16_matches_reference: GgmlType::F16,
    bf16_matches_reference: GgmlType::Bf16,
}

#[test]
fn every_quantized_type_has_kernels() {
    for ty in QUANTIZED {
        let data = vec![0u8; ty.block_bytes()];
        let w = WeightRef {
            ty,
            data: &data,
            rows: 1,
            cols: ty.block_elems(),
        };
        let mut out = [0f32];
        assert!(
            quantized::matmul(Isa::Scalar, Path::Gemv, 0, &w, &vec![1.0; w.cols], &mut out),
            "{ty}"
        );
    }
}

/// Q8_0 codes straight from random bytes reach -128, which the quantizer never writes: the
/// AVX2 sign trick and the VNNI bias must both hold there.
#[test]
fn q8_0_extreme_codes_match_reference() {
    let mut rng = StdRng::seed_from_u64(80);
    let (n, rows, cols) = (9, 24, 512);
    let mut data = vec![0u8; rows * cols / 32 * 34];
    rng.fill(&mut data[..]);
    for (i, block) in data.chunks_exact_mut(34).enumerate() {
        block[..2]
            .copy_from_slice(&half::f16::from_f32(0.01 + (i % 5) as f32 * 0.003).to_le_bytes());
        block[2] = 0x80;
    }
    let w = WeightRef {
        ty: GgmlType::Q8_0,
        data: &data,
        rows,
        cols,
    };
    let x = activations(&mut rng, n, cols);
    let mut want = vec![0f32; n * rows];
    matmul_reference(&w, &x, &mut want);
    let mags = magnitudes(&w, &x);
    for isa in Isa::available() {
        for path in paths(isa) {
            let mut got = vec![0f32; n * rows];
            matmul_with(isa, path, &w, &x, &mut got);
            assert!(worst(&got, &want, &mags) <= TOL, "{isa:?} {path:?}");
        }
    }
}

/// K-quant blocks need 2-byte alignment to be viewed in place; an odd offset takes the copy.
#[test]
fn unaligned_k_quant_data_matches_reference() {
    let mut rng = StdRng::seed_from_u64(12);
    let (n, rows, cols) = (4, 10, 512);
    let data = weight(&mut rng, GgmlType::Q4K, rows, cols);
    let mut shifted = vec![0u8; data.len() + 1];
    shifted[1..].copy_from_slice(&data);
    let w = WeightRef {
        ty: GgmlType::Q4K,
        data: &shifted[1..],
        rows,
        cols,
    };
    let x = activations(&mut rng, n, cols);
    let mut want = vec![0f32; n * rows];
    matmul_reference(&w, &x, &mut want);
    let mut got = vec![0f32; n * rows];
    matmul(&CpuPlan::detect(), &w, &x, &mut got);
    assert!(worst(&got, &want, &magnitudes(&w, &x)) <= TOL);
}

/// The tolerance is meaningful: one weight code off by one, in one row, is caught by a wide
/// margin on every level.
#[test]
fn an_off_by_one_code_fails_the_tolerance() {
    let mut rng = StdRng::seed_from_u64(1);
    let (n, rows, cols) = (17, 16, 2048);
    let data = weight(&mut rng, GgmlType::Q4_1, rows, cols);
    let w = WeightRef {
        ty: GgmlType::Q4_1,
        data: &data,
        rows,
        cols,
    };
    let x = activations(&mut rng, n, cols);
    let mut want = vec![0f32; n * rows];
    matmul_reference(&w, &x, &mut want);
    let mags = magnitudes(&w, &x);
    let mut bad = data.clone();
    // Row 5, block 40, element 3's nibble: +1 (or -1 at the top code).
    let at = 5 * (cols / 32 * 20) + 40 * 20 + 4 + 3;
    bad[at] = if bad[at] & 0xF == 0xF {
        bad[at] - 1
    } else {
        bad[at] + 1
    };
    let wb = WeightRef { data: &bad, ..w };
    for isa in Isa::available() {
        let mut got = vec![0f32; n * rows];
        matmul_with(isa, Path::Auto, &wb, &x, &mut got);
        let e = worst(&got, &want, &mags);
        assert!(
            e > 20.0 * TOL,
            "{isa:?}: an altered code went unnoticed ({e:e})"
        );
    }
}

/// Integer-scale formats (Q4_K) follow one arithmetic on every level and path (llama.cpp's, see
/// `Format::INT_SCALES`), so all of them agree bit for bit; the order of each token (pairs of
/// units or whole blocks) is `Order`'s, and the two orders do differ somewhere.
#[test]
fn integer_scale_kernels_agree_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(31);
    for &(n, rows, cols) in &[(1, 37, 512), (3, 45, 256), (7, 33, 768), (22, 64, 512)] {
        let data = weight(&mut rng, GgmlType::Q4K, rows, cols);
        let w = WeightRef {
            ty: GgmlType::Q4K,
            data: &data,
            rows,
            cols,
        };
        let x = activations(&mut rng, n, cols);
        let run = |isa, path, order| {
            let mut out = vec![0f32; n * rows];
            matmul_full(isa, path, order, &w, &x, &mut out);
            out
        };
        let dense = run(Isa::Scalar, Path::Auto, Order::Dense);
        let by_rows = run(Isa::Scalar, Path::Auto, Order::Rows);
        for isa in Isa::available() {
            for path in paths(isa) {
                assert_eq!(
                    run(isa, path, Order::Dense),
                    dense,
                    "{isa:?} {path:?} n={n}"
                );
                assert_eq!(
                    run(isa, path, Order::Rows),
                    by_rows,
                    "{isa:?} {path:?} n={n}"
                );
            }
        }
        // Under 4 tokens llama.cpp has no tiled pass: both orders go by blocks.
        assert_eq!(dense == by_rows, n < 4, "n={n}");
    }
}

/// Q8_0 and Q5_0 follow llama.cpp's eight-lane order (`Format::LANES`) on every level and
/// path: per output, lane `l` adds `fma(d·dx, Σ q·x over elements 4l..4l+4 of the block, lane)`
/// block by block, and the lanes fold as ((0+4)+(2+6))+((1+5)+(3+7)). Checked bit for bit
/// against that arithmetic written out here from the blocks themselves (activations from
/// ggml's x86 Q8_0 quantizer), including Q8_0 codes of -128 and shapes off every tile.
#[test]
fn lane_order_kernels_keep_eight_lanes_bit_for_bit() {
    use ferrolm_quant::BlockQ8_0;
    let mut rng = StdRng::seed_from_u64(47);
    for ty in [GgmlType::Q8_0, GgmlType::Q5_0] {
        let block_bytes = ty.block_bytes();
        for &(n, rows, cols) in &[
            (1, 37, 512),
            (2, 9, 256),
            (3, 45, 256),
            (7, 33, 768),
            (22, 70, 512),
        ] {
            let mut data = weight(&mut rng, ty, rows, cols);
            if ty == GgmlType::Q8_0 {
                // A few codes at -128, which only hand-made files hold.
                for i in (0..data.len()).step_by(977) {
                    if i % 34 >= 2 {
                        data[i] = 0x80;
                    }
                }
            }
            let w = WeightRef {
                ty,
                data: &data,
                rows,
                cols,
            };
            // Each block's scale and signed codes, from its values (exact: d · q in f32).
            let blocks: Vec<(f32, [i32; 32])> = data
                .chunks_exact(block_bytes)
                .map(|b| {
                    let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                    let mut v = [0f32; 32];
                    ferrolm_quant::dequantize(ty, b, &mut v).unwrap();
                    (d, v.map(|v| if d == 0.0 { 0 } else { (v / d) as i32 }))
                })
                .collect();
            let x = activations(&mut rng, n, cols);
            let mut want = vec![0f32; n * rows];
            for t in 0..n {
                let xq: Vec<BlockQ8_0> = x[t * cols..][..cols]
                    .chunks_exact(32)
                    .map(|c| BlockQ8_0::quantize_x86(c.try_into().unwrap()))
                    .collect();
                for r in 0..rows {
                    let mut l = [0f32; 8];
                    for ((wd, wq), xb) in blocks[r * cols / 32..][..cols / 32].iter().zip(&xq) {
                        let s = wd * xb.d();
                        for (k, lane) in l.iter_mut().enumerate() {
                            let dot: i32 = (4 * k..4 * k + 4)
                                .map(|i| wq[i] * i32::from(xb.codes()[i]))
                                .sum();
                            *lane = s.mul_add(dot as f32, *lane);
                        }
                    }
                    want[t * rows + r] =
                        ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
                }
            }
            for isa in Isa::available() {
                for path in paths(isa) {
                    let mut got = vec![f32::NAN; n * rows];
                    matmul_with(isa, path, &w, &x, &mut got);
                    let bad = got
                        .iter()
                        .zip(&want)
                        .filter(|(a, b)| a.to_bits() != b.to_bits());
                    assert_eq!(
                        bad.count(),
                        0,
                        "{ty} {isa:?} {path:?} n={n} rows={rows} cols={cols}"
                    );
                }
            }
        }
    }
}
