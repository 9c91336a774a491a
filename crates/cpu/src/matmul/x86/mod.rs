//! x86-64 kernels for two levels: AVX2 (with FMA and F16C) and AVX-512 (F/BW/VL/VNNI).
//!
//! Decoding a weight block to bytes only needs AVX2, so each format's decoder is written once
//! here and inlined into both levels, which differ in the byte dot product (`vpmaddubsw` +
//! `vpmaddwd` against `vpdpbusd`) and, for prefill, in the tile width.
//!
//! Legacy decoders are here, K-quant ones in `kquant`. Every `unsafe fn` carries
//! `#[target_feature]`, except the generic `#[inline(always)]` bodies in `gemv`, which exist
//! only to be inlined into one that does (Rust does not allow both attributes on one function).
//! The entry points below rely on the level the caller detected (`matmul_with` asserts it).

mod gemm;
mod gemv;
mod kquant;
mod lanes;

use super::act::Acts;
use super::formats::{self, Format};
use super::Isa;
use std::arch::x86_64::*;

/// A format's decoder: 32 codes at a time, one byte each, in element order.
pub(in crate::matmul) trait SimdFormat: Format {
    /// Codes of elements `32c..32c + 32` of `b` (`c < ELEMS / 32`).
    ///
    /// # Safety
    /// AVX2 must be available.
    unsafe fn codes32(b: &Self::Block, c: usize) -> __m256i;

    /// [`codes32`](Self::codes32) of the first 32 elements in both halves of a 512-bit vector.
    ///
    /// # Safety
    /// AVX-512F must be available.
    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn codes32x2(b: &Self::Block) -> __m512i {
        _mm512_broadcast_i64x4(Self::codes32(b, 0))
    }

    /// [`Format::params`] of consecutive blocks, converting scales with F16C.
    ///
    /// # Safety
    /// AVX2 and F16C must be available.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn params_run(blocks: &[Self::Block], scale: &mut [f32], off: &mut [f32]) {
        let upb = Self::ELEMS / Self::UNIT;
        for ((b, s), o) in blocks
            .iter()
            .zip(scale.chunks_exact_mut(upb))
            .zip(off.chunks_exact_mut(upb))
        {
            // SAFETY: F16C is enabled in this function, which the closure inherits.
            Self::params(b, |h| unsafe { f16_to_f32(h) }, s, o);
        }
    }
}

/// Decode rows: `out[r][t]` (`[rows][n]`) for the whole rows of `w` and every token.
pub(super) fn gemv<F: SimdFormat>(
    isa: Isa,
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    match isa {
        // SAFETY: `isa` was detected on this CPU (checked by `matmul_with`).
        Isa::Avx512 => unsafe { gemv::rows_avx512::<F>(w, bpr, acts, pairs, out) },
        // SAFETY: as above.
        Isa::Avx2 => unsafe { gemv::rows_avx2::<F>(w, bpr, acts, pairs, out) },
        Isa::Scalar => unreachable!("the scalar level has its own kernel"),
    }
}

/// Prefill: `out` (`[n][rows]`) through repacked weight tiles, or for lane-order formats
/// (Q8_0) through `lanes`' tiles on the blocks as stored.
pub(super) fn gemm<F: SimdFormat>(
    isa: Isa,
    w: &[F::Block],
    rows: usize,
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    if F::LANES {
        lanes::gemm::<F>(isa, w, rows, bpr, acts, out);
    } else {
        gemm::gemm::<F>(isa, w, rows, bpr, acts, pairs, out);
    }
}

#[inline]
#[target_feature(enable = "f16c")]
unsafe fn f16_to_f32(h: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load32(bytes: &[u8]) -> __m256i {
    assert!(bytes.len() >= 32);
    _mm256_loadu_si256(bytes.as_ptr().cast())
}

/// `(v >> n) & mask` on every byte (the 16-bit shift's spill-over is masked away).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bits(v: __m256i, n: usize, mask: u8) -> __m256i {
    let shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32));
    _mm256_and_si256(shifted, _mm256_set1_epi8(mask as i8))
}

/// A Q4-style 16-byte array as 32 codes: low nibbles (elements 0..16), then high nibbles.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibbles16(qs: &[u8; 16]) -> __m256i {
    let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs.as_ptr().cast()));
    // Shift only the upper copy: its bytes then hold the high nibbles.
    let v = _mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

/// Byte `i` is 0x10 where bit `i` of `qh` is set: Q5_0/Q5_1's fifth bits in place.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fifth_bits(qh: u32) -> __m256i {
    // Byte i takes byte i / 8 of qh, then keeps bit i % 8 of it.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

impl SimdFormat for formats::Q4_0 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, _: usize) -> __m256i {
        nibbles16(&b.qs)
    }
}

impl SimdFormat for formats::Q4_1 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, _: usize) -> __m256i {
        nibbles16(&b.qs)
    }
}

impl SimdFormat for formats::Q5_0 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, _: usize) -> __m256i {
        _mm256_or_si256(nibbles16(&b.qs), fifth_bits(b.qh()))
    }
}

impl SimdFormat for formats::Q5_1 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, _: usize) -> __m256i {
        _mm256_or_si256(nibbles16(&b.qs), fifth_bits(b.qh()))
    }
}

impl SimdFormat for formats::Q8_0 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes32(b: &Self::Block, _: usize) -> __m256i {
        _mm256_xor_si256(load32(&b.qs), _mm256_set1_epi8(i8::MIN))
    }

    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn codes32x2(b: &Self::Block) -> __m512i {
        // Loaded straight into both halves, then biased.
        _mm512_xor_si512(
            _mm512_broadcast_i64x4(load32(&b.qs)),
            _mm512_set1_epi8(i8::MIN),
        )
    }
}
