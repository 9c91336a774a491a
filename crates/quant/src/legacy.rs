//! The 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Every block is a `#[repr(C)]` Pod struct made only of byte arrays: alignment 1, so any
//! `&[u8]` holding whole blocks can be viewed as `&[BlockQ4_0]` etc. with
//! `bytemuck::cast_slice`, wherever it sits in a mapped file. Multi-byte fields are
//! little-endian, as on disk; accessors decode them.
//!
//! Quantizers reproduce ggml's reference ones (`quantize_row_*_ref`) operation for operation
//! in f32, with no fused multiply-add, so they give the same bytes.

mod q4;
mod q5;
mod q8;

pub use q4::{BlockQ4_0, BlockQ4_1};
pub use q5::{BlockQ5_0, BlockQ5_1};
pub use q8::{BlockQ8_0, BlockQ8_1};

use crate::float::{f16_bits_to_f32, f32_to_f16_bits};
use crate::{Codec, GgmlType};
use bytemuck::Pod;

/// Elements per block, for every format here.
pub const QK: usize = 32;

/// A 32-element block: its type, and its conversion from and to floats.
pub trait LegacyBlock: Pod {
    const TYPE: GgmlType;
    fn dequantize(&self, out: &mut [f32; QK]);
    fn quantize(x: &[f32; QK]) -> Self;
}

pub(crate) const CODECS: &[Codec] = &[
    codec::<BlockQ4_0>(),
    codec::<BlockQ4_1>(),
    codec::<BlockQ5_0>(),
    codec::<BlockQ5_1>(),
    codec::<BlockQ8_0>(),
    codec::<BlockQ8_1>(),
];

const fn codec<B: LegacyBlock>() -> Codec {
    Codec {
        ty: B::TYPE,
        dequantize_block: dequantize_block::<B>,
        quantize_block: quantize_block::<B>,
    }
}

fn dequantize_block<B: LegacyBlock>(block: &[u8], out: &mut [f32]) {
    let out: &mut [f32; QK] = out.try_into().expect("a block dequantizes to 32 floats");
    bytemuck::from_bytes::<B>(block).dequantize(out);
}

fn quantize_block<B: LegacyBlock>(x: &[f32], out: &mut [u8]) {
    let x: &[f32; QK] = x.try_into().expect("a block quantizes 32 floats");
    *bytemuck::from_bytes_mut::<B>(out) = B::quantize(x);
}

fn f16_le(bytes: [u8; 2]) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes(bytes))
}

fn to_f16_le(x: f32) -> [u8; 2] {
    f32_to_f16_bits(x).to_le_bytes()
}

/// `1 / d`, but 0 for a zero scale so that an all-zero block quantizes to the zero code.
fn inverse(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// The element of largest magnitude, sign kept; the first one wins a tie, as in ggml.
fn signed_absmax(x: &[f32; QK]) -> f32 {
    let mut best = 0.0f32;
    for &v in x {
        if v.abs() > best.abs() {
            best = v;
        }
    }
    best
}

/// (min, max), keeping the first of equal values (this decides the sign of a zero minimum).
fn min_max(x: &[f32; QK]) -> (f32, f32) {
    let (mut lo, mut hi) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The x86 Q8_0 quantizer rounds ties to even and scales by 127 / absmax; the reference
    /// rounds them away from zero. Elsewhere they agree.
    #[test]
    fn q8_0_x86_rounds_ties_to_even() {
        let mut x = [0.0f32; QK];
        x[0] = 127.0; // d = 1, both scales exactly 1
        x[1] = 0.5;
        x[2] = -2.5;
        x[3] = 1.25;
        let (r, v) = (BlockQ8_0::quantize(&x), BlockQ8_0::quantize_x86(&x));
        assert_eq!(r.d, v.d);
        assert_eq!(&r.codes()[..4], &[127, 1, -3, 1]);
        assert_eq!(&v.codes()[..4], &[127, 0, -2, 1]);
        let zero = BlockQ8_0::quantize_x86(&[0.0; QK]);
        assert_eq!((zero.d(), zero.codes()), (0.0, &[0i8; QK]));
    }

    #[test]
    fn block_structs_match_ggml_geometry() {
        fn check<B: LegacyBlock>() {
            assert_eq!(
                B::TYPE.block_geometry(),
                (QK, size_of::<B>()),
                "{}",
                B::TYPE
            );
            // Alignment 1 is what lets any byte slice be viewed as blocks.
            assert_eq!(align_of::<B>(), 1, "{}", B::TYPE);
        }
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
    }

    #[test]
    fn codecs_convert_exactly_one_block_of_their_geometry() {
        for c in CODECS {
            let (elems, bytes) = c.ty.block_geometry();
            let x: Vec<f32> = (0..elems).map(|i| i as f32 - 7.25).collect();
            let mut q = vec![0u8; bytes];
            (c.quantize_block)(&x, &mut q);
            let mut y = vec![f32::NAN; elems];
            (c.dequantize_block)(&q, &mut y);
            assert!(y.iter().all(|v| v.is_finite()), "{}: {y:?}", c.ty);
        }
    }

    #[test]
    fn helpers_follow_ggml_tie_rules() {
        let mut x = [0.0f32; QK];
        x[3] = -2.0;
        x[9] = 2.0;
        assert_eq!(signed_absmax(&x), -2.0);
        x[3] = 2.0;
        x[9] = -2.0;
        assert_eq!(signed_absmax(&x), 2.0);
        let mut z = [0.5f32; QK];
        z[0] = -0.0;
        z[1] = 0.0;
        assert!(min_max(&z).0.is_sign_negative());
        assert_eq!(crate::q8simd::absmax(&z), 0.5);
        assert_eq!(inverse(0.0), 0.0);
    }
}
