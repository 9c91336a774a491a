//! The vector pieces of the 8-bit quantizers (Q8_0, Q8_1, Q8_K), which the CPU matmul runs on
//! every activation row.
//!
//! Each function returns exactly what its plain scalar formulation (written out in each doc
//! comment, and kept verbatim in the tests as the reference) returns, for every input: NaNs,
//! infinities and out-of-range products included, since a tiny but finite block can make the
//! scale infinite. Only the way of computing changes:
//!
//! - maxima are taken over lanes and then across them. `max` is exact and NaNs are skipped
//!   either way, so the order cannot change the result;
//! - C `roundf` (half away from zero; a libm call per element on baseline x86-64) is done with
//!   exact float steps instead. Values are clamped to the i8 range first, which is harmless
//!   because the rounding is monotonic and the bounds are integers, and then: AVX2 truncates
//!   `v ± 0.49999997`, the portable code rounds half to even with the 1.5·2²³ trick and
//!   moves ties that went toward zero. (`v ± 0.5` would not do: 0.49999997 + 0.5 rounds
//!   up to 1.) The tests check both against `roundf` on all 2³² f32 bit patterns.
//!
//! Two implementations: portable Rust shaped for the auto-vectorizer, and AVX2 intrinsics
//! picked at run time.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(test)]
mod tests;

/// Whether the AVX2 kernels may run (a cached feature test after the first call).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Largest `|x[i]|`, NaNs skipped; 0 for an empty or all-NaN block.
/// Scalar form: `x.iter().fold(0.0, |m, v| m.max(v.abs()))`.
#[inline]
pub(crate) fn absmax<const N: usize>(x: &[f32; N]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::absmax(x) };
    }
    portable::absmax(x)
}

/// The first element of largest magnitude, sign kept; 0 when no `|x[i]|` exceeds 0.
/// Scalar form: keep `v` whenever `v.abs() > amax`, starting from `amax = 0`.
#[inline]
pub(crate) fn first_absmax<const N: usize>(x: &[f32; N]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::first_absmax(x) };
    }
    portable::first_absmax(x)
}

/// `out[i] = (x[i] * scale).round() as i8`: C `roundf`, then Rust's saturating cast (NaN to
/// 0). Returns the sum of the codes.
#[inline]
pub(crate) fn round_away<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::round_away(x, scale, out) };
    }
    portable::round_away(x, scale, out)
}

/// `out[i] = (x[i] * scale).round_ties_even() as i8` (Rust's saturating cast, NaN to 0), as
/// ggml's x86 `quantize_row_q8_0`/`_q8_1` round (`_mm256_round_ps`, nearest even). Returns
/// the sum of the codes.
#[inline]
pub(crate) fn round_even<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::round_even(x, scale, out) };
    }
    portable::round_even(x, scale, out)
}

/// `out[i] = nearest_int(scale * x[i]).min(127) as i8`, with ggml's magic-number
/// `nearest_int` (`((v + 1.5·2²³) - 1.5·2²³) as i32`, half to even) and a truncating final
/// cast, exactly as the Q8_K reference writes it.
#[inline]
pub(crate) fn nearest<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::nearest(x, scale, out) };
    }
    portable::nearest(x, scale, out)
}

/// Sums of each 16 consecutive codes: `q[16j..16j + 16]` summed as i16.
#[inline]
pub(crate) fn sums16(q: &[i8; 256]) -> [i16; 16] {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::sums16(q) };
    }
    portable::sums16(q)
}

/// The first element of largest magnitude, given the largest element `hi ≥ 0` and the
/// smallest `lo ≤ 0` (both from 0, NaNs skipped): whichever reaches further wins, and only when
/// both do is the position needed.
#[inline(always)]
fn pick_signed_max<const N: usize>(x: &[f32; N], hi: f32, lo: f32) -> f32 {
    if hi > -lo {
        hi
    } else if hi < -lo {
        lo
    } else if hi == 0.0 {
        0.0
    } else {
        x.iter().copied().find(|v| v.abs() == hi).unwrap_or(hi)
    }
}

/// 1.5·2²³: adding it pushes `|v| ≤ 2²²` into the binade where f32 spacing is 1.
const MAGIC: f32 = 12_582_912.0;

/// Plain Rust the compiler vectorizes: fixed lane counts, selects instead of branches, and no
/// libm calls.
pub(crate) mod portable {
    use super::MAGIC;

    /// Independent running maxima, so the loop has no serial dependency to block vectorizing.
    const LANES: usize = 8;

    /// `a` if it is larger, else `m`: a NaN `a` leaves `m`, as `f32::max` does.
    #[inline(always)]
    fn keep_larger(m: f32, a: f32) -> f32 {
        if a > m {
            a
        } else {
            m
        }
    }

    pub(crate) fn absmax<const N: usize>(x: &[f32; N]) -> f32 {
        const { assert!(N.is_multiple_of(LANES)) };
        let mut m = [0.0f32; LANES];
        for c in x.chunks_exact(LANES) {
            for (m, &v) in m.iter_mut().zip(c) {
                *m = keep_larger(*m, v.abs());
            }
        }
        m.into_iter().fold(0.0, keep_larger)
    }

    pub(crate) fn first_absmax<const N: usize>(x: &[f32; N]) -> f32 {
        const { assert!(N.is_multiple_of(LANES)) };
        // Largest and smallest element (NaNs skipped, both starting from 0): whichever has
        // the larger magnitude is the answer, unless both have it.
        let (mut hi, mut lo) = ([0.0f32; LANES], [0.0f32; LANES]);
        for c in x.chunks_exact(LANES) {
            for ((hi, lo), &v) in hi.iter_mut().zip(&mut lo).zip(c) {
                *hi = keep_larger(*hi, v);
                *lo = if v < *lo { v } else { *lo };
            }
        }
        let hi = hi.into_iter().fold(0.0, keep_larger);
        let lo = lo.into_iter().fold(0.0, |m, v| if v < m { v } else { m });
        super::pick_signed_max(x, hi, lo)
    }

    /// `v` with NaN replaced by 0 and clamped to the i8 range.
    #[inline(always)]
    fn clamp_i8(v: f32) -> f32 {
        if v.is_nan() {
            0.0
        } else {
            v.clamp(-128.0, 127.0)
        }
    }

    /// `r + MAGIC` as an f32, and the integer it encodes: for `|r| ≤ 2²²` the sum lands in
    /// the binade of spacing 1, rounded half to even, and its bits minus MAGIC's are that
    /// integer. No float-to-int conversion, so this vectorizes without saturation fix-ups.
    #[inline(always)]
    fn magic_round(r: f32) -> (f32, i32) {
        let m = r + MAGIC;
        (m - MAGIC, m.to_bits() as i32 - MAGIC.to_bits() as i32)
    }

    /// `v.round() as i8`, exactly, without libm: round half to even, then move ties that went
    /// toward zero one step away from it.
    #[inline(always)]
    pub(crate) fn round_away_i8(v: f32) -> i8 {
        let c = clamp_i8(v);
        let (even, q) = magic_round(c);
        let diff = c - even; // exact, in -0.5..=0.5
        let away = i32::from(diff == 0.5 && c > 0.0) - i32::from(diff == -0.5 && c < 0.0);
        (q + away) as i8
    }

    pub(crate) fn round_away<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) -> i32 {
        let mut sum = 0;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = round_away_i8(v * scale);
            sum += i32::from(*o);
        }
        sum
    }

    pub(crate) fn round_even<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) -> i32 {
        let mut sum = 0;
        for (o, &v) in out.iter_mut().zip(x) {
            // Clamping first matches the saturating cast: rounding is monotonic and the
            // bounds are integers.
            *o = magic_round(clamp_i8(v * scale)).1 as i8;
            sum += i32::from(*o);
        }
        sum
    }

    pub(crate) fn nearest<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) {
        // `r` is always a whole number (or ±inf, NaN). From -128 up, `(r as i32).min(127) as
        // i8` is `r` clamped to -128..=127 (NaN to 0); below -128 the final cast wraps. Q8_K
        // only gets there when its scale overflowed to infinity: redo such blocks plainly.
        let mut wraps = false;
        for (o, &v) in out.iter_mut().zip(x) {
            let r = ((scale * v) + MAGIC) - MAGIC;
            wraps |= r < -128.0;
            *o = magic_round(clamp_i8(r)).1 as i8;
        }
        if wraps {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = ((((scale * v) + MAGIC) - MAGIC) as i32).min(127) as i8;
            }
        }
    }

    pub(crate) fn sums16(q: &[i8; 256]) -> [i16; 16] {
        let mut out = [0i16; 16];
        for (s, chunk) in out.iter_mut().zip(q.chunks_exact(16)) {
            *s = chunk.iter().map(|&q| i16::from(q)).sum();
        }
        out
    }
}
