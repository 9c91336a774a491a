//! The eight-lane order of `Format::LANES` formats (Q8_0, Q5_0), shared by every level.
//!
//! Per output (a weight row against a token) there are eight f32 lanes. For each 32-element
//! block, lane `l` takes the exact integer dot of elements `4l..4l + 4`, converted, and adds it
//! as `fma(scale · dx, dot, lane)` (the block's two scales multiplied in f32 first). After the
//! last block the lanes fold as `((0+4) + (2+6)) + ((1+5) + (3+7))`, the order of a 256-bit
//! vector halved twice. This is what llama.cpp's x86 build computes for Q8_0 weights in its
//! tiled prefill matmul and in its row dot alike, so tile shapes and token counts do not enter
//! the result: every level and path here gives the same bits.

use super::act::Acts;
use super::formats::Format;

/// The lanes' sum in the order a 256-bit register is halved: upper half onto lower, then the
/// upper pair onto the lower, then the odd lane onto the even.
pub(super) fn fold(l: &[f32; 8]) -> f32 {
    let h = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// The portable kernel for lane-order formats: `out[r][t]` (`[rows][n]`).
pub(super) fn gemv<F: Format>(w: &[F::Block], bpr: usize, acts: &Acts, out: &mut [f32]) {
    debug_assert!(F::LANES && F::ELEMS == 32 && F::UNIT == 32);
    let h = |bits: u16| half::f16::from_bits(bits).to_f32();
    let mut codes = [0u8; 32];
    let (mut scale, mut off) = ([0f32; 1], [0f32; 1]);
    for (row, o) in w.chunks_exact(bpr).zip(out.chunks_exact_mut(acts.n)) {
        for (t, ov) in o.iter_mut().enumerate() {
            let (x, dx) = (acts.codes(t), acts.d(t));
            let mut lanes = [0f32; 8];
            for (b, blk) in row.iter().enumerate() {
                F::params(blk, h, &mut scale, &mut off);
                F::codes(blk, &mut codes);
                let s = scale[0] * dx[b];
                let xb = &x[32 * b..][..32];
                for (l, lane) in lanes.iter_mut().enumerate() {
                    let dot: i32 = (4 * l..4 * l + 4)
                        .map(|i| (i32::from(codes[i]) - F::BIAS) * i32::from(xb[i]))
                        .sum();
                    *lane = s.mul_add(dot as f32, *lane);
                }
            }
            *ov = fold(&lanes);
        }
    }
}
