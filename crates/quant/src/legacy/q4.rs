//! Q4_0 and Q4_1: 4-bit codes, two per byte. Byte j holds element j in its low nibble and
//! element j + 16 in its high nibble.

use super::{f16_le, inverse, min_max, signed_absmax, to_f16_le, LegacyBlock, QK};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};

/// Q4_0, 18 bytes: `x = d * (q - 8)`, q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// Q4_1, 20 bytes: `x = d * q + m`, q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Offset (the block minimum), f16.
    pub m: [u8; 2],
    pub qs: [u8; QK / 2],
}

impl BlockQ4_0 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
}

impl BlockQ4_1 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    pub fn m(&self) -> f32 {
        f16_le(self.m)
    }
}

/// Packs 32 codes (each < 16) into nibbles.
fn pack_nibbles(q: impl Fn(usize) -> u8) -> [u8; QK / 2] {
    std::array::from_fn(|j| q(j) | (q(j + QK / 2) << 4))
}

/// The 32 codes, in element order.
fn unpack_nibbles(qs: &[u8; QK / 2]) -> impl Iterator<Item = u8> + '_ {
    let lo = qs.iter().map(|b| b & 0x0f);
    let hi = qs.iter().map(|b| b >> 4);
    lo.chain(hi)
}

impl LegacyBlock for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d();
        for (o, q) in out.iter_mut().zip(unpack_nibbles(&self.qs)) {
            *o = d * (i32::from(q) - 8) as f32;
        }
    }

    fn quantize(x: &[f32; QK]) -> Self {
        // Dividing by -8 maps the extreme value onto code 0 exactly, so it round-trips with
        // its sign; the opposite extreme lands on 16 and is clipped to 15. A block of zeros
        // gets d = +0 / -8 = -0, as in ggml (gguf-py gives +0 for a block of -0.0).
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        // `as u8` truncates toward zero like ggml's int cast; +8.5 makes that a rounding.
        let code = |j: usize| ((x[j] * id + 8.5) as u8).min(15);
        Self {
            d: to_f16_le(d),
            qs: pack_nibbles(code),
        }
    }
}

impl LegacyBlock for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;

    fn dequantize(&self, out: &mut [f32; QK]) {
        let (d, m) = (self.d(), self.m());
        for (o, q) in out.iter_mut().zip(unpack_nibbles(&self.qs)) {
            *o = d * f32::from(q) + m;
        }
    }

    fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        // Codes are taken against the exact f32 minimum, not its f16 rounding, as in ggml.
        let code = |j: usize| (((x[j] - min) * id + 0.5) as u8).min(15);
        Self {
            d: to_f16_le(d),
            m: to_f16_le(min),
            qs: pack_nibbles(code),
        }
    }
}
