//! The K-quant decoders, and their scale unpacking done with vector ops rather than per unit.

use super::{bits, f16_to_f32, load32, SimdFormat};
use crate::matmul::formats;
use std::arch::x86_64::*;

/// Eight bytes (little-endian in `v`) as eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bytes_to_f32(v: u64) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)))
}

/// `-v`, exactly (a sign flip).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn neg(v: __m256) -> __m256 {
    _mm256_xor_ps(v, _mm256_set1_ps(-0.0))
}

/// Q4_K/Q5_K's eight 6-bit scales and mins from their 12 packed bytes, as two u64 of 8 bytes.
/// Per byte lane: scales 0-3 are the low 6 bits of bytes 0-3; scales 4-7 take their low nibble
/// from bytes 8-11 and their top 2 bits from bits 6-7 of bytes 0-3 (mins alike, from bytes
/// 4-7 and the high nibbles of 8-11).
fn unpack_scale_min(q: &[u8; 12]) -> (u64, u64) {
    let word = |i: usize| u64::from(u32::from_le_bytes(q[4 * i..4 * i + 4].try_into().unwrap()));
    let (a, b, c) = (word(0), word(1), word(2));
    let scales = (a & 0x3F3F_3F3F) | (((c & 0x0F0F_0F0F) | ((a >> 2) & 0x3030_3030)) << 32);
    let mins = (b & 0x3F3F_3F3F) | ((((c >> 4) & 0x0F0F_0F0F) | ((b >> 2) & 0x3030_3030)) << 32);
    (scales, mins)
}

/// `scale = d·sc` and `off = -(dmin·m)` for eight units, the same f32 products as the reference.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn affine8(d: f32, dmin: f32, (sc, m): (u64, u64), scale: &mut [f32], off: &mut [f32]) {
    let (scale, off) = (&mut scale[..8], &mut off[..8]);
    _mm256_storeu_ps(
        scale.as_mut_ptr(),
        _mm256_mul_ps(_mm256_set1_ps(d), bytes_to_f32(sc)),
    );
    let mins = _mm256_mul_ps(_mm256_set1_ps(dmin), bytes_to_f32(m));
    _mm256_storeu_ps(off.as_mut_ptr(), neg(mins));
}

// K-quants: chunk c covers values 32c..32c+32; for the 2-bit-plane layouts (Q2_K, Q3_K and
// Q6_K's high bits) that is plane c % 4 of the 32 bytes of half c / 4.

impl SimdFormat for formats::Q2K {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn params_run(blocks: &[Self::Block], scale: &mut [f32], off: &mut [f32]) {
        for ((b, s), o) in blocks
            .iter()
            .zip(scale.chunks_exact_mut(16))
            .zip(off.chunks_exact_mut(16))
        {
            let (d, dmin) = (f16_to_f32(b.d.to_bits()), f16_to_f32(b.dmin.to_bits()));
            let (lo, hi) = b.scales.split_at(8);
            let lo = u64::from_le_bytes(lo.try_into().unwrap());
            let hi = u64::from_le_bytes(hi.try_into().unwrap());
            let nibbles = |v: u64| (v & 0x0F0F_0F0F_0F0F_0F0F, (v >> 4) & 0x0F0F_0F0F_0F0F_0F0F);
            affine8(d, dmin, nibbles(lo), &mut s[..8], &mut o[..8]);
            affine8(d, dmin, nibbles(hi), &mut s[8..], &mut o[8..]);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, c: usize) -> __m256i {
        bits(load32(&b.qs[32 * (c / 4)..]), 2 * (c % 4), 3)
    }
}

impl SimdFormat for formats::Q3K {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, c: usize) -> __m256i {
        let low = bits(load32(&b.qs[32 * (c / 4)..]), 2 * (c % 4), 3);
        let high = bits(load32(&b.hmask), c, 1);
        _mm256_or_si256(low, _mm256_slli_epi16::<2>(high))
    }
}

impl SimdFormat for formats::Q4K {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn params_run(blocks: &[Self::Block], scale: &mut [f32], off: &mut [f32]) {
        for ((b, s), o) in blocks
            .iter()
            .zip(scale.chunks_exact_mut(8))
            .zip(off.chunks_exact_mut(8))
        {
            let (d, dmin) = (f16_to_f32(b.d.to_bits()), f16_to_f32(b.dmin.to_bits()));
            affine8(d, dmin, unpack_scale_min(&b.scales), s, o);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, c: usize) -> __m256i {
        bits(load32(&b.qs[32 * (c / 2)..]), 4 * (c % 2), 0xF)
    }
}

impl SimdFormat for formats::Q5K {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn params_run(blocks: &[Self::Block], scale: &mut [f32], off: &mut [f32]) {
        for ((b, s), o) in blocks
            .iter()
            .zip(scale.chunks_exact_mut(8))
            .zip(off.chunks_exact_mut(8))
        {
            let (d, dmin) = (f16_to_f32(b.d.to_bits()), f16_to_f32(b.dmin.to_bits()));
            affine8(d, dmin, unpack_scale_min(&b.scales), s, o);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, c: usize) -> __m256i {
        let low = bits(load32(&b.qs[32 * (c / 2)..]), 4 * (c % 2), 0xF);
        let high = bits(load32(&b.qh), c, 1);
        _mm256_or_si256(low, _mm256_slli_epi16::<4>(high))
    }
}

impl SimdFormat for formats::Q6K {
    /// Symmetric: only the scales; offsets stay 0.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn params_run(blocks: &[Self::Block], scale: &mut [f32], off: &mut [f32]) {
        off.fill(0.0);
        for (b, s) in blocks.iter().zip(scale.chunks_exact_mut(16)) {
            let d = _mm256_set1_ps(f16_to_f32(b.d.to_bits()));
            let sc = _mm_loadu_si128(b.scales.as_ptr().cast());
            let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc));
            let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sc)));
            _mm256_storeu_ps(s[..8].as_mut_ptr(), _mm256_mul_ps(d, lo));
            _mm256_storeu_ps(s[8..16].as_mut_ptr(), _mm256_mul_ps(d, hi));
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, c: usize) -> __m256i {
        let (h, k) = (c / 4, c % 4);
        let low = bits(load32(&b.ql[64 * h + 32 * (k % 2)..]), 4 * (k / 2), 0xF);
        let high = bits(load32(&b.qh[32 * h..]), 2 * k, 3);
        _mm256_or_si256(low, _mm256_slli_epi16::<4>(high))
    }
}
