//! AVX2 versions of the [`super`] functions (see each one's doc there), equal to them on
//! every input.
//!
//! # Safety
//! Every function here needs AVX2; callers check for it at run time.

use super::MAGIC;
use std::arch::x86_64::*;

/// `|v|`: the sign bit cleared.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn abs(v: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
}

/// Eight floats from `x[at..at + 8]`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load(x: &[f32], at: usize) -> __m256 {
    let lanes = &x[at..at + 8];
    // SAFETY: `lanes` is eight in-bounds floats; the load is unaligned.
    _mm256_loadu_ps(lanes.as_ptr())
}

/// `v` with its NaN lanes set to 0.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nan_to_zero(v: __m256) -> __m256 {
    _mm256_and_ps(v, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v))
}

/// The low byte of each i32 lane of `q[0..4]`, in order, as 32 bytes (a truncating cast).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn low_bytes(q: [__m256i; 4], out: &mut [i8]) {
    let byte = _mm256_set1_epi32(0xff);
    let mut q = q;
    for v in &mut q {
        *v = _mm256_and_si256(*v, byte);
    }
    // Every lane is now 0..=255, so the saturating unsigned packs keep it as is. Each pack
    // interleaves 128-bit halves; the permute puts the 4-byte groups back in order.
    let ab = _mm256_packus_epi32(q[0], q[1]);
    let cd = _mm256_packus_epi32(q[2], q[3]);
    let abcd = _mm256_packus_epi16(ab, cd);
    let v = _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let out = &mut out[..32];
    // SAFETY: `out` is 32 in-bounds bytes; the store is unaligned.
    _mm256_storeu_si256(out.as_mut_ptr().cast(), v);
}

/// The largest lane of `v` (no NaN).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)))
}

/// The smallest lane of `v` (no NaN).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hmin(v: __m256) -> f32 {
    let m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_min_ss(m, _mm_shuffle_ps::<1>(m, m)))
}

/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn absmax<const N: usize>(x: &[f32; N]) -> f32 {
    const { assert!(N.is_multiple_of(32)) };
    let mut m = [_mm256_setzero_ps(); 4];
    for c in x.chunks_exact(32) {
        for (i, m) in m.iter_mut().enumerate() {
            // `max_ps` returns its second operand when either is NaN: NaN lanes of `x` leave
            // the running maximum alone, as `f32::max` does.
            *m = _mm256_max_ps(abs(load(c, 8 * i)), *m);
        }
    }
    // No NaN is left, so the reduction order is free.
    hmax(_mm256_max_ps(
        _mm256_max_ps(m[0], m[1]),
        _mm256_max_ps(m[2], m[3]),
    ))
}

/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn first_absmax<const N: usize>(x: &[f32; N]) -> f32 {
    const { assert!(N.is_multiple_of(8)) };
    let (mut hi, mut lo) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for c in x.chunks_exact(8) {
        let v = load(c, 0);
        // NaN lanes of `v` keep the second operand, as in `absmax`.
        hi = _mm256_max_ps(v, hi);
        lo = _mm256_min_ps(v, lo);
    }
    super::pick_signed_max(x, hmax(hi), hmin(lo))
}

/// `v.round()` as i32 lanes for `v` in -128..=127 with no NaN: truncate `v ± 0.49999997`
/// (the float just below one half, sign of `v`). That sum rounds up to the next integer
/// exactly when `|fract(v)| ≥ 0.5`: at `0.5` itself the sum `1 - 2⁻²⁵` is a tie that rounds
/// to even, 1.0; below, `0.49999997 + 0.49999997` stays under 1. With 0.5 instead, values just
/// under one half would round up. This is also how LLVM lowers `round` for SSE4.1.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn round_away_epi32(v: __m256) -> __m256i {
    let sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0));
    let half = _mm256_or_ps(sign, _mm256_set1_ps(0.49999997));
    _mm256_cvttps_epi32(_mm256_add_ps(v, half))
}

/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn round_away<const N: usize>(
    x: &[f32; N],
    scale: f32,
    out: &mut [i8; N],
) -> i32 {
    round_codes::<N, false>(x, scale, out)
}

/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn round_even<const N: usize>(
    x: &[f32; N],
    scale: f32,
    out: &mut [i8; N],
) -> i32 {
    round_codes::<N, true>(x, scale, out)
}

/// The codes of `x * scale`, rounded half to even (`EVEN`) or half away from zero, and their
/// sum.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
unsafe fn round_codes<const N: usize, const EVEN: bool>(
    x: &[f32; N],
    scale: f32,
    out: &mut [i8; N],
) -> i32 {
    const { assert!(N.is_multiple_of(32)) };
    let (s, lo, hi) = (
        _mm256_set1_ps(scale),
        _mm256_set1_ps(-128.0),
        _mm256_set1_ps(127.0),
    );
    let mut sum = _mm256_setzero_si256();
    for (c, o) in x.chunks_exact(32).zip(out.chunks_exact_mut(32)) {
        let mut q = [_mm256_setzero_si256(); 4];
        for (i, q) in q.iter_mut().enumerate() {
            // NaN converts to 0; clamping to the i8 range before rounding matches the
            // saturating cast after it (rounding is monotonic and the bounds are integers).
            let v = nan_to_zero(_mm256_mul_ps(load(c, 8 * i), s));
            let v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
            *q = if EVEN {
                _mm256_cvtps_epi32(_mm256_round_ps::<
                    { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                >(v))
            } else {
                round_away_epi32(v)
            };
            sum = _mm256_add_epi32(sum, *q);
        }
        low_bytes(q, o);
    }
    let sum = _mm_add_epi32(
        _mm256_castsi256_si128(sum),
        _mm256_extracti128_si256::<1>(sum),
    );
    let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b01_00_11_10>(sum));
    let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b10_11_00_01>(sum));
    _mm_cvtsi128_si32(sum)
}

/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn nearest<const N: usize>(x: &[f32; N], scale: f32, out: &mut [i8; N]) {
    const { assert!(N.is_multiple_of(32)) };
    let (s, magic, hi) = (
        _mm256_set1_ps(scale),
        _mm256_set1_ps(MAGIC),
        _mm256_set1_ps(127.0),
    );
    for (c, o) in x.chunks_exact(32).zip(out.chunks_exact_mut(32)) {
        let mut q = [_mm256_setzero_si256(); 4];
        for (i, q) in q.iter_mut().enumerate() {
            let p = _mm256_mul_ps(s, load(c, 8 * i));
            let r = _mm256_sub_ps(_mm256_add_ps(p, magic), magic);
            // Rust's `r as i32` gives 0 for NaN and saturates, then `.min(127)` caps it. So:
            // NaN to 0, cap at 127 before converting, and below i32's range cvtt's 0x8000_0000
            // already is the saturated value. The final cast to i8 truncates (`low_bytes`).
            *q = _mm256_cvttps_epi32(_mm256_min_ps(nan_to_zero(r), hi));
        }
        low_bytes(q, o);
    }
}

/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sums16(q: &[i8; 256]) -> [i16; 16] {
    let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    // Per 32 codes: eight i32 sums of 4 (maddubs pairs them, madd pairs again), so the low
    // 128-bit half holds the first group of 16 and the high half the second.
    let mut quads = [_mm256_setzero_si256(); 8];
    for (quad, c) in quads.iter_mut().zip(q.chunks_exact(32)) {
        // SAFETY: `c` is 32 in-bounds bytes; the load is unaligned.
        let v = _mm256_loadu_si256(c.as_ptr().cast());
        *quad = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16);
    }
    // Two rounds of horizontal adds finish the groups: g0's low half holds groups 0, 2, 4, 6
    // and its high half groups 1, 3, 5, 7; g1 the same for groups 8 to 15.
    let g0 = _mm256_hadd_epi32(
        _mm256_hadd_epi32(quads[0], quads[1]),
        _mm256_hadd_epi32(quads[2], quads[3]),
    );
    let g1 = _mm256_hadd_epi32(
        _mm256_hadd_epi32(quads[4], quads[5]),
        _mm256_hadd_epi32(quads[6], quads[7]),
    );
    // Sums are within ±2048, so the pack is exact. Low half: groups 0, 2, .., 14; high half:
    // 1, 3, .., 15. Interleave them.
    let p = _mm256_packs_epi32(g0, g1);
    let (even, odd) = (_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
    let mut out = [0i16; 16];
    // SAFETY: `out` is 32 bytes; the stores are unaligned, 16 bytes each.
    _mm_storeu_si128(out.as_mut_ptr().cast(), _mm_unpacklo_epi16(even, odd));
    _mm_storeu_si128(out[8..].as_mut_ptr().cast(), _mm_unpackhi_epi16(even, odd));
    out
}
