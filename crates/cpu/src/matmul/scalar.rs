//! The portable kernel: integer dots one unit at a time. Every level's results are checked
//! against the reference, and this one is also what non-x86 targets run.

use super::act::Acts;
use super::formats::Format;

/// `out[r][t]` (`[rows][n]`) for the whole rows of `w` (`bpr` blocks each) and every token.
pub(super) fn gemv<F: Format>(w: &[F::Block], bpr: usize, acts: &Acts, out: &mut [f32]) {
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
