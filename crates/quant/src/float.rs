//! Plain float formats: F32, F16, BF16. Each "block" is one little-endian element.
//!
//! NaNs: F16 keeps NaN payloads and signalling bits both ways (as numpy, and so gguf-py, does),
//! so F16 -> f32 -> F16 is lossless. BF16 follows ggml: quantizing forces NaNs quiet.

use crate::{Codec, GgmlType};
use half::f16;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn is_nan16(h: u16) -> bool {
        h & F16_EXP == F16_EXP && h & F16_MANT != 0
    }

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
}
