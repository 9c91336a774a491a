//! Times the activation quantizers (Q8_0, Q8_1, Q8_K) on matmul-shaped rows, and F16/BF16
//! row conversion, in ns per element on one thread.
//!
//! `cargo run --release -p ferrolm-quant --example quant_speed`
//!
//! Each `old` column runs what the crate did before on the same data in the same run, trials
//! interleaved with the new code so machine load hits both alike: for Q8_*, a verbatim copy of
//! the scalar quantizers (libm `roundf` per element); for F16/BF16, one codec call per element.

use ferrolm_quant::{
    codec, dequantize, quantize, BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType, LegacyBlock, SuperBlock,
};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::hint::black_box;
use std::time::Instant;

const SHAPES: [(usize, usize); 2] = [(512, 576), (512, 1536)];
const TRIALS: usize = 15;

/// Best of [`TRIALS`] runs each of `old` and `new` over `elems` elements, alternating, in ns
/// per element.
fn time_pair(elems: usize, mut old: impl FnMut(), mut new: impl FnMut()) -> (f64, f64) {
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed().as_nanos() as f64 / elems as f64
    };
    // Warm caches and any lazy feature detection.
    old();
    new();
    let (mut best_old, mut best_new) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..TRIALS {
        best_old = best_old.min(time(&mut old));
        best_new = best_new.min(time(&mut new));
    }
    (best_old, best_new)
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

/// Quantizes every `N`-element block of `x` into `out`, as the matmul does row by row.
fn run<const N: usize, B>(x: &[f32], out: &mut [B], quantize: impl Fn(&[f32; N]) -> B) {
    for (o, c) in out.iter_mut().zip(x.chunks_exact(N)) {
        *o = quantize(c.try_into().expect("whole block"));
    }
    black_box(out);
}

/// (old, new) ns per element for two quantizers of the same block size.
fn time_quantizers<const N: usize, A: Clone, B: Clone>(
    x: &[f32],
    old: fn(&[f32; N]) -> A,
    new: fn(&[f32; N]) -> B,
) -> (f64, f64) {
    let first: &[f32; N] = x[..N].try_into().expect("one block");
    let mut a = vec![old(first); x.len() / N];
    let mut b = vec![new(first); x.len() / N];
    time_pair(
        x.len(),
        || run(black_box(x), &mut a, old),
        || run(black_box(x), &mut b, new),
    )
}

fn report(what: &str, shape: (usize, usize), (old, new): (f64, f64)) {
    let (rows, cols) = shape;
    println!(
        "{what:<10} {rows}x{cols:<5}  old {old:6.3} ns/elem   new {new:6.3} ns/elem   {:5.2}x",
        old / new
    );
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

        report(
            "Q8_0",
            shape,
            time_quantizers(&x, old::q8_0, BlockQ8_0::quantize),
        );
        report(
            "Q8_1",
            shape,
            time_quantizers(&x, old::q8_1, BlockQ8_1::quantize),
        );
        report(
            "Q8_K",
            shape,
            time_quantizers(&x, old::q8_k, BlockQ8K::quantize),
        );

        for ty in [GgmlType::F16, GgmlType::Bf16] {
            let c = codec(ty).expect("float codec");
            let (mut bytes, mut old_bytes) = (vec![0u8; n * 2], vec![0u8; n * 2]);
            let times = time_pair(
                n,
                || {
                    for (v, o) in x.iter().zip(old_bytes.chunks_exact_mut(2)) {
                        (c.quantize_block)(std::slice::from_ref(v), o);
                    }
                    black_box(&old_bytes);
                },
                || quantize(ty, black_box(&x), &mut bytes).expect("quantize"),
            );
            report(&format!("{ty} quant"), shape, times);
            let (mut y, mut old_y) = (vec![0f32; n], vec![0f32; n]);
            let times = time_pair(
                n,
                || {
                    for (b, o) in bytes.chunks_exact(2).zip(old_y.iter_mut()) {
                        (c.dequantize_block)(b, std::slice::from_mut(o));
                    }
                    black_box(&old_y);
                },
                || dequantize(ty, black_box(&bytes), &mut y).expect("dequantize"),
            );
            report(&format!("{ty} deq"), shape, times);
        }
    }
}
