//! The portable kernel: integer dots one unit at a time. Every level's results are checked
//! against the reference, and this one is also what non-x86 targets run.

use super::act::Acts;
use super::formats::Format;

/// `out[r][t]` (`[rows][n]`) for the whole rows of `w` (`bpr` blocks each) and every token;
/// integer-scale formats sum tokens `..pairs` per pair of units, the rest per block.
pub(super) fn gemv<F: Format>(
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    if F::INT_SCALES {
        return gemv_int_scales::<F>(w, bpr, acts, pairs, out);
    }
    if F::LANES {
        return super::lanes::gemv::<F>(w, bpr, acts, out);
    }
    let upb = F::ELEMS / F::UNIT;
    let mut scale = vec![0f32; bpr * upb];
    let mut off = vec![0f32; bpr * upb];
    let mut codes = vec![0u8; F::ELEMS];
    let h = |bits: u16| half::f16::from_bits(bits).to_f32();
    for (row, o) in w.chunks_exact(bpr).zip(out.chunks_exact_mut(acts.n)) {
        for ((b, s), of) in row
            .iter()
            .zip(scale.chunks_exact_mut(upb))
            .zip(off.chunks_exact_mut(upb))
        {
            F::params(b, h, s, of);
        }
        o.fill(0.0);
        for (b, blk) in row.iter().enumerate() {
            F::codes(blk, &mut codes);
            for (t, acc) in o.iter_mut().enumerate() {
                let x = &acts.codes(t)[b * F::ELEMS..][..F::ELEMS];
                let (dx, sx, xb) = (acts.d(t), acts.s(t), acts.xb(t));
                for (j, (c, xv)) in codes
                    .chunks_exact(F::UNIT)
                    .zip(x.chunks_exact(F::UNIT))
                    .enumerate()
                {
                    let u = b * upb + j;
                    // Starting from `-BIAS·Σx` makes the sum exactly `Σ (code - BIAS)·x`.
                    let dot: i32 = c
                        .iter()
                        .zip(xv)
                        .map(|(&c, &x)| i32::from(c) * i32::from(x))
                        .sum::<i32>()
                        + xb[u];
                    *acc += dot as f32 * (scale[u] * dx[u]) + off[u] * sx[u];
                }
            }
        }
    }
}

/// [`gemv`] for integer-scale formats (`Format::INT_SCALES`): per token, the unit dots times
/// their integer scales and the mins times the units' `Σx` are summed exactly in integers over
/// a pair of units (tokens `..pairs`) or a block, then each sum takes one fused multiply-add
/// into its accumulator; the result is `acc - acc_min`. The SIMD kernels do the same steps.
fn gemv_int_scales<F: Format>(
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    let upb = F::ELEMS / F::UNIT;
    let (mut sc, mut m) = (vec![0i32; upb], vec![0i32; upb]);
    let mut codes = vec![0u8; F::ELEMS];
    let h = |bits: u16| half::f16::from_bits(bits).to_f32();
    for (row, o) in w.chunks_exact(bpr).zip(out.chunks_exact_mut(acts.n)) {
        let mut acc = vec![(0f32, 0f32); acts.n];
        for (b, blk) in row.iter().enumerate() {
            let (d, dmin) = F::int_params(blk, h, &mut sc, &mut m);
            F::codes(blk, &mut codes);
            for (t, (acc, acc_min)) in acc.iter_mut().enumerate() {
                let x = &acts.codes(t)[b * F::ELEMS..][..F::ELEMS];
                let (dx, sum) = (acts.d(t)[b * upb], &acts.sum(t)[b * upb..][..upb]);
                let (ds, dm) = (d * dx, dmin * dx);
                let step = if t < pairs { 2 } else { upb };
                let (mut isum, mut imin) = (0i32, 0i32);
                for (j, (c, xv)) in codes
                    .chunks_exact(F::UNIT)
                    .zip(x.chunks_exact(F::UNIT))
                    .enumerate()
                {
                    let dot: i32 = c
                        .iter()
                        .zip(xv)
                        .map(|(&c, &x)| i32::from(c) * i32::from(x))
                        .sum();
                    isum += sc[j] * dot;
                    imin += m[j] * sum[j];
                    if (j + 1) % step == 0 {
                        *acc = (isum as f32).mul_add(ds, *acc);
                        *acc_min = (imin as f32).mul_add(dm, *acc_min);
                        (isum, imin) = (0, 0);
                    }
                }
            }
        }
        for (o, (acc, acc_min)) in o.iter_mut().zip(acc) {
            *o = acc - acc_min;
        }
    }
}
