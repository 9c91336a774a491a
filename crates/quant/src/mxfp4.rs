//! MXFP4 (OCP microscaling FP4, gpt-oss's expert weights): 32 elements share one E8M0 scale
//! byte, and each element is a 4-bit index into the E2M1 values.
//!
//! ggml stores the E2M1 values doubled, as the integers of [`KVALUES`] (so that they are exact
//! `i8`s for integer dot products), and halves the scale to match: `x = kvalues[q] · 2^(e-128)`
//! (`ggml_e8m0_to_fp32_half`). Byte `j` of `qs` holds element `j` in its low nibble and
//! element `j + 16` in its high one, as Q4_0 does.

use crate::{Codec, GgmlType};
use bytemuck::{Pod, Zeroable};

/// Elements per block.
pub const QK_MXFP4: usize = 32;

/// The E2M1 values, doubled (ggml's `kvalues_mxfp4`): index 8 is a second zero (-0).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4, 17 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockMxfp4 {
    /// The shared exponent, E8M0 (a power of two, `2^(e-127)`).
    pub e: u8,
    pub qs: [u8; QK_MXFP4 / 2],
}

/// Half the E8M0 scale `e` as an f32, bit for bit as ggml's `ggml_e8m0_to_fp32_half`:
/// `2^(e-128)`, with the two smallest exponents as subnormals.
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

impl BlockMxfp4 {
    /// Half the block's scale (the factor of the doubled [`KVALUES`]).
    pub fn d(&self) -> f32 {
        e8m0_to_f32_half(self.e)
    }

    /// The 32 signed values `kvalues[q]` (the doubled E2M1 values), in element order.
    pub fn values(&self) -> [i8; QK_MXFP4] {
        std::array::from_fn(|i| {
            let byte = self.qs[i % 16];
            KVALUES[usize::from(if i < 16 { byte & 0x0F } else { byte >> 4 })]
        })
    }

    pub fn dequantize(&self, out: &mut [f32; QK_MXFP4]) {
        let d = self.d();
        for (o, v) in out.iter_mut().zip(self.values()) {
            *o = f32::from(v) * d;
        }
    }

    /// ggml's `quantize_row_mxfp4_ref`: the exponent of the block's absmax less 2 (so that the
    /// largest magnitude lands among the top E2M1 values), then each element's nearest value
    /// (the first of equals).
    pub fn quantize(x: &[f32; QK_MXFP4]) -> Self {
        let amax = x
            .iter()
            .fold(0f32, |m, v| if m < v.abs() { v.abs() } else { m });
        // The cast wraps like ggml's on x86 (through a 32-bit integer) for the tiny amaxes
        // whose exponent falls below the format's.
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        let best = |v: f32| -> u8 {
            let mut best = 0;
            let mut best_err = (f32::from(KVALUES[0]) * d - v).abs();
            for (i, &k) in KVALUES.iter().enumerate().skip(1) {
                let err = (f32::from(k) * d - v).abs();
                if err < best_err {
                    best = i as u8;
                    best_err = err;
                }
            }
            best
        };
        Self {
            e,
            qs: std::array::from_fn(|j| best(x[j]) | (best(x[j + 16]) << 4)),
        }
    }
}

pub(crate) const CODECS: &[Codec] = &[Codec {
    ty: GgmlType::Mxfp4,
    dequantize_block,
    quantize_block,
}];

fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let out: &mut [f32; QK_MXFP4] = out.try_into().expect("a block dequantizes to 32 floats");
    bytemuck::from_bytes::<BlockMxfp4>(block).dequantize(out);
}

fn quantize_block(x: &[f32], out: &mut [u8]) {
    let x: &[f32; QK_MXFP4] = x.try_into().expect("a block quantizes 32 floats");
    *bytemuck::from_bytes_mut::<BlockMxfp4>(out) = BlockMxfp4::quantize(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_half_the_e8m0_power_of_two() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(255), 2f32.powi(127));
    }

    /// A block of grid values (one of them ±12, which sets the exponent) round-trips exactly.
    #[test]
    fn grid_values_round_trip() {
        let e = 120;
        let d = e8m0_to_f32_half(e);
        let q: [u8; 32] = std::array::from_fn(|i| ((i * 7 + 3) % 16) as u8);
        let x: [f32; 32] = std::array::from_fn(|i| {
            let k = if i == 5 {
                -12
            } else {
                KVALUES[usize::from(q[i])]
            };
            f32::from(k) * d
        });
        let b = BlockMxfp4::quantize(&x);
        assert_eq!(b.e, e);
        let mut y = [0f32; 32];
        b.dequantize(&mut y);
        assert_eq!(y, x);
    }
}
