//! Plain float formats: F32, F16, BF16. Each "block" is one little-endian element.
//!
//! NaNs: F16 keeps NaN payloads and signalling bits both ways (as numpy, and so gguf-py, does),
//! so F16 -> f32 -> F16 is lossless. BF16 follows ggml: quantizing forces NaNs quiet.

use crate::{Codec, GgmlType};
use half::f16;
use half::slice::HalfFloatSliceExt;

pub(crate) const CODECS: &[Codec] = &[
    Codec {
        ty: GgmlType::F32,
        dequantize_block: dequantize_f32,
        quantize_block: quantize_f32,
    },
    Codec {
        ty: GgmlType::F16,
        dequantize_block: dequantize_f16,
        quantize_block: quantize_f16,
    },
    Codec {
        ty: GgmlType::Bf16,
        dequantize_block: dequantize_bf16,
        quantize_block: quantize_bf16,
    },
];

const F16_EXP: u16 = 0x7c00;
const F16_MANT: u16 = 0x03ff;
const F32_EXP: u32 = 0x7f80_0000;
const F32_MANT: u32 = 0x007f_ffff;

/// f16 bits to f32, exactly. `half` (and F16C) quiet signalling NaNs on the way; numpy does
/// not, and the dequantize oracle is numpy, so NaNs take a bit-preserving path of their own.
#[inline]
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    if h & F16_EXP == F16_EXP && h & F16_MANT != 0 {
        let sign = u32::from(h & 0x8000) << 16;
        return f32::from_bits(sign | F32_EXP | (u32::from(h & F16_MANT) << 13));
    }
    f16::from_bits(h).to_f32()
}

/// f32 to f16 bits, rounding to nearest even. NaNs keep their sign and the top of their
/// payload (signalling stays signalling, as in numpy); a payload that would truncate to zero
/// becomes 1 so the result is still a NaN rather than an infinity.
#[inline]
pub(crate) fn f32_to_f16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & F32_EXP == F32_EXP && u & F32_MANT != 0 {
        let sign = ((u >> 16) & 0x8000) as u16;
        let payload = ((u & F32_MANT) >> 13) as u16;
        return sign | F16_EXP | payload.max(1);
    }
    f16::from_f32(x).to_bits()
}

/// ggml's fp32 -> bf16: round to nearest even on the bit pattern (overflow carries into the
/// exponent and gives infinity, as it should), NaNs forced quiet with their payload's top bits.
#[inline]
pub(crate) fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > F32_EXP {
        return ((u >> 16) | 0x40) as u16;
    }
    // Cannot overflow: the largest non-NaN pattern is -inf, 0xff80_0000.
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[inline]
pub(crate) fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

fn dequantize_f32(block: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes(block.try_into().expect("F32 block is 4 bytes"));
}

fn quantize_f32(x: &[f32], out: &mut [u8]) {
    out.copy_from_slice(&x[0].to_le_bytes());
}

fn dequantize_f16(block: &[u8], out: &mut [f32]) {
    let h = u16::from_le_bytes(block.try_into().expect("F16 block is 2 bytes"));
    out[0] = f16_bits_to_f32(h);
}

fn quantize_f16(x: &[f32], out: &mut [u8]) {
    out.copy_from_slice(&f32_to_f16_bits(x[0]).to_le_bytes());
}

fn dequantize_bf16(block: &[u8], out: &mut [f32]) {
    let h = u16::from_le_bytes(block.try_into().expect("BF16 block is 2 bytes"));
    out[0] = bf16_bits_to_f32(h);
}

fn quantize_bf16(x: &[f32], out: &mut [u8]) {
    out.copy_from_slice(&f32_to_bf16_bits(x[0]).to_le_bytes());
}

/// Elements converted per step of the row functions: a stack buffer's worth.
const ROW_CHUNK: usize = 256;

/// `true` for an f16 NaN bit pattern.
#[inline(always)]
fn is_nan16(h: u16) -> bool {
    h & 0x7fff > F16_EXP
}

/// Dequantizes a whole row of a float format at once, the same values as the per-element
/// codec gives. Returns false, touching nothing, for any other type.
pub(crate) fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> bool {
    match ty {
        GgmlType::F32 => {
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::Bf16 => {
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16_bits_to_f32(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        GgmlType::F16 => {
            for (src, dst) in src.chunks(2 * ROW_CHUNK).zip(dst.chunks_mut(ROW_CHUNK)) {
                let mut bits = [0u16; ROW_CHUNK];
                let bits = &mut bits[..dst.len()];
                for (b, c) in bits.iter_mut().zip(src.chunks_exact(2)) {
                    *b = u16::from_le_bytes([c[0], c[1]]);
                }
                // `half` converts slices with F16C where the CPU has it. Both that and the
                // scalar path are exact except that F16C quiets signalling NaNs, so NaNs are
                // redone bit-exactly.
                let halves: &[f16] = bytemuck::cast_slice(bits);
                halves.convert_to_f32_slice(dst);
                if bits.iter().fold(false, |any, &h| any | is_nan16(h)) {
                    for (o, &h) in dst.iter_mut().zip(bits.iter()) {
                        if is_nan16(h) {
                            *o = f16_bits_to_f32(h);
                        }
                    }
                }
            }
        }
        _ => return false,
    }
    true
}

/// Quantizes a whole row into a float format at once, the same bytes as the per-element
/// codec writes. Returns false, touching nothing, for any other type.
pub(crate) fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> bool {
    match ty {
        GgmlType::F32 => {
            for (o, &v) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::Bf16 => {
            for (o, &v) in dst.chunks_exact_mut(2).zip(src) {
                o.copy_from_slice(&f32_to_bf16_bits(v).to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (src, dst) in src.chunks(ROW_CHUNK).zip(dst.chunks_mut(2 * ROW_CHUNK)) {
                let mut halves = [f16::ZERO; ROW_CHUNK];
                let halves = &mut halves[..src.len()];
                // Finite values and infinities round to nearest even either way (F16C or
                // `half`'s scalar code); NaNs keep their payload only on the scalar path.
                halves.convert_from_f32_slice(src);
                if src.iter().fold(false, |any, v| any | v.is_nan()) {
                    for (h, &v) in halves.iter_mut().zip(src) {
                        if v.is_nan() {
                            *h = f16::from_bits(f32_to_f16_bits(v));
                        }
                    }
                }
                for (o, h) in dst.chunks_exact_mut(2).zip(halves.iter()) {
                    o.copy_from_slice(&h.to_bits().to_le_bytes());
                }
            }
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_survives_a_round_trip_through_f32() {
        for h in 0..=u16::MAX {
            let x = f16_bits_to_f32(h);
            assert_eq!(f32_to_f16_bits(x), h, "f16 bits {h:#06x} -> {x:?}");
            if !is_nan16(h) {
                // Off the NaN path the conversion is `half`'s, which is exact.
                assert_eq!(x.to_bits(), f16::from_bits(h).to_f32().to_bits());
            } else {
                assert!(x.is_nan());
                assert_eq!(x.is_sign_negative(), h & 0x8000 != 0);
            }
        }
    }

    #[test]
    fn f32_nans_stay_nans_in_f16() {
        for u in [
            0x7f80_0001u32,
            0xff80_0001,
            0x7fc0_0000,
            0x7f80_2000,
            0xffff_ffff,
        ] {
            let h = f32_to_f16_bits(f32::from_bits(u));
            assert!(is_nan16(h), "{u:#010x} -> {h:#06x}");
            assert_eq!(h & 0x8000 != 0, u & 0x8000_0000 != 0);
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nans() {
        // Exactly half-way: ties go to the even mantissa.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        // Just past half-way rounds up.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8001)), 0x3f81);
        // Largest finite f32 rounds to infinity.
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        // Signalling NaN comes out quiet with its sign.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0xff80_0001)), 0xffc0);
        for h in 0..=u16::MAX {
            if h & 0x7f80 != 0x7f80 || h & 0x7f == 0 || h & 0x40 != 0 {
                // Every non-NaN and every quiet NaN converts back to itself.
                assert_eq!(f32_to_bf16_bits(bf16_bits_to_f32(h)), h);
            }
        }
    }

    /// Per-element codec calls, as `dequantize`/`quantize` made before the row paths.
    fn per_element(ty: GgmlType) -> &'static Codec {
        CODECS.iter().find(|c| c.ty == ty).unwrap()
    }

    /// Bit patterns that stress the float conversions: every f16 (as f32, so NaN payloads
    /// of both kinds), the f32 midpoints between neighbouring f16s and the values one ulp
    /// either side (ties to even, and not ties), f32 NaNs, and pseudo-random bit patterns.
    fn f32_patterns() -> Vec<f32> {
        let mut v = Vec::new();
        for h in 0..=u16::MAX {
            let x = f16_bits_to_f32(h);
            v.push(x);
            let next = f16_bits_to_f32(h.wrapping_add(1));
            if x.is_finite() && next.is_finite() && (x < 0.0) == (next < 0.0) {
                let mid = (x + next) / 2.0; // exact: f16 has far fewer mantissa bits
                let b = mid.to_bits();
                v.extend([mid, f32::from_bits(b + 1), f32::from_bits(b - 1)]);
            }
        }
        v.extend(
            [
                0x7f80_0001u32,
                0xff80_0001,
                0x7fc0_0000,
                0x7f80_2000,
                0xffff_ffff,
            ]
            .map(f32::from_bits),
        );
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            v.push(f32::from_bits((state >> 32) as u32));
        }
        v
    }

    #[test]
    fn row_paths_equal_per_element_conversion() {
        let xs = f32_patterns();
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Bf16] {
            let c = per_element(ty);
            let bb = ty.block_bytes();
            // Odd lengths leave partial chunks; the offset source is misaligned.
            for n in [1, 7, 255, 257, 1000, xs.len()] {
                let x = &xs[xs.len() - n..];
                let mut want = vec![0u8; n * bb];
                for (v, o) in x.iter().zip(want.chunks_exact_mut(bb)) {
                    (c.quantize_block)(std::slice::from_ref(v), o);
                }
                let mut got = vec![0u8; n * bb];
                assert!(quantize_row(ty, x, &mut got));
                assert_eq!(got, want, "{ty} quantize, {n} elements");
                let got = crate::quantize_to_vec(ty, x).unwrap();
                assert_eq!(got, want, "{ty} quantize");

                let mut shifted = vec![0u8; 1];
                shifted.extend_from_slice(&want);
                let mut back = vec![0f32; n];
                let mut back_want = vec![0f32; n];
                for (b, o) in want.chunks_exact(bb).zip(&mut back_want) {
                    (c.dequantize_block)(b, std::slice::from_mut(o));
                }
                assert!(dequantize_row(ty, &shifted[1..], &mut back));
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&back),
                    bits(&back_want),
                    "{ty} dequantize, {n} elements"
                );
                let back = crate::dequantize_to_vec(ty, &shifted[1..], n).unwrap();
                assert_eq!(bits(&back), bits(&back_want), "{ty} dequantize");
            }
        }
        assert!(!dequantize_row(GgmlType::Q8_0, &[], &mut []));
        assert!(!quantize_row(GgmlType::Q8_0, &[], &mut []));
    }

    #[test]
    fn every_f16_dequantizes_as_per_element() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        let got = crate::dequantize_to_vec(GgmlType::F16, &bytes, 1 << 16).unwrap();
        for (h, v) in (0..=u16::MAX).zip(got) {
            assert_eq!(v.to_bits(), f16_bits_to_f32(h).to_bits(), "{h:#06x}");
        }
    }
}
