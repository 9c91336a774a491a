//! Times the activation quantizers (Q8_0, Q8_1, Q8_K) on matmul-shaped rows, and F16/BF16
//! row conversion, in ns per element on one thread.
//!
//! `cargo run --release -p ferrolm-quant --example quant_speed`
//!
//! The `old` rows run a verbatim copy of the scalar quantizers the crate used before they were
//! vectorized (libm `roundf` per element), so one run compares both on the same machine state.

use ferrolm_quant::{
    dequantize, quantize, BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType, LegacyBlock, SuperBlock, QK_K,
};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::hint::black_box;
use std::time::Instant;

const SHAPES: [(usize, usize); 2] = [(512, 576), (512, 1536)];
const TRIALS: usize = 7;

/// Best of [`TRIALS`] runs of `f` over `elems` elements, in ns per element.
fn ns_per_elem(elems: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm caches and any lazy feature detection
    (0..TRIALS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / elems as f64
        })
        .fold(f64::INFINITY, f64::min)
}

mod old {
    //! The pre-vectorization quantizers, kept only for timing.
    use half::f16;

    pub fn q8_0(x: &[f32; 32]) -> ([u8; 2], [i8; 32]) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let qs = std::array::from_fn(|j| (x[j] * id).round() as i8);
        (f16::from_f32(d).to_bits().to_le_bytes(), qs)
    }

    pub fn q8_1(x: &[f32; 32]) -> ([u8; 2], [u8; 2], [i8; 32]) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let qs: [i8; 32] = std::array::from_fn(|j| (x[j] * id).round() as i8);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        let s = f16::from_f32(sum as f32 * d).to_bits().to_le_bytes();
        (f16::from_f32(d).to_bits().to_le_bytes(), s, qs)
    }

    pub fn q8_k(x: &[f32; 256]) -> (f32, [i8; 256], [i16; 16]) {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let (mut qs, mut bsums) = ([0i8; 256], [0i16; 16]);
        if amax == 0.0 {
            return (0.0, qs, bsums);
        }
        let iscale = -127.0 / max;
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = ((((iscale * v) + 12_582_912.0) - 12_582_912.0) as i32).min(127) as i8;
        }
        for (s, chunk) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
            *s = chunk.iter().map(|&q| i16::from(q)).sum();
        }
        (1.0 / iscale, qs, bsums)
    }
}

fn blocks<const N: usize>(x: &[f32]) -> impl Iterator<Item = &[f32; N]> {
    x.chunks_exact(N)
        .map(|c| c.try_into().expect("whole block"))
}

fn report(what: &str, shape: (usize, usize), old: Option<f64>, new: f64) {
    let (rows, cols) = shape;
    match old {
        Some(old) => println!(
            "{what:<12} {rows}x{cols:<5}  old {old:6.3} ns/elem   new {new:6.3} ns/elem   {:5.2}x",
            old / new
        ),
        None => println!("{what:<12} {rows}x{cols:<5}  {new:6.3} ns/elem"),
    }
}

fn main() {
    // One rayon thread, so the slice-level conversions are timed like the block-level ones.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("rayon pool");
    let mut rng = StdRng::seed_from_u64(1);
    for shape in SHAPES {
        let n = shape.0 * shape.1;
        let x: Vec<f32> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();

        let old = ns_per_elem(n, || {
            blocks::<32>(&x).for_each(|b| {
                black_box(old::q8_0(black_box(b)));
            })
        });
        let new = ns_per_elem(n, || {
            blocks::<32>(&x).for_each(|b| {
                black_box(BlockQ8_0::quantize(black_box(b)));
            })
        });
        report("Q8_0", shape, Some(old), new);

        let old = ns_per_elem(n, || {
            blocks::<32>(&x).for_each(|b| {
                black_box(old::q8_1(black_box(b)));
            })
        });
        let new = ns_per_elem(n, || {
            blocks::<32>(&x).for_each(|b| {
                black_box(BlockQ8_1::quantize(black_box(b)));
            })
        });
        report("Q8_1", shape, Some(old), new);

        let old = ns_per_elem(n, || {
            blocks::<QK_K>(&x).for_each(|b| {
                black_box(old::q8_k(black_box(b)));
            })
        });
        let new = ns_per_elem(n, || {
            blocks::<QK_K>(&x).for_each(|b| {
                black_box(BlockQ8K::quantize(black_box(b)));
            })
        });
        report("Q8_K", shape, Some(old), new);

        for ty in [GgmlType::F16, GgmlType::Bf16] {
            let mut bytes = vec![0u8; n * 2];
            let mut y = vec![0f32; n];
            let q = ns_per_elem(n, || {
                quantize(ty, black_box(&x), &mut bytes).expect("quantize")
            });
            report(&format!("{ty} quant"), shape, None, q);
            let deq = ns_per_elem(n, || {
                dequantize(ty, black_box(&bytes), &mut y).expect("dequantize")
            });
            report(&format!("{ty} deq"), shape, None, deq);
        }
    }
}
