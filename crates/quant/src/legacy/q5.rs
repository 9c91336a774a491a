//! Q5_0 and Q5_1: 5-bit codes. The low four bits are packed like Q4 (byte j holds element j
//! low, element j + 16 high); bit i of the little-endian u32 `qh` is the fifth bit of element i.

use super::{f16_le, inverse, min_max, signed_absmax, to_f16_le, LegacyBlock, QK};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};

/// Q5_0, 22 bytes: `x = d * (q - 16)`, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Fifth bits, u32 little-endian.
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// Q5_1, 24 bytes: `x = d * q + m`, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Offset (the block minimum), f16.
    pub m: [u8; 2],
    /// Fifth bits, u32 little-endian.
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

impl BlockQ5_0 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    pub fn qh(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

impl BlockQ5_1 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    pub fn m(&self) -> f32 {
        f16_le(self.m)
    }

    pub fn qh(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

/// Splits 32 codes (each < 32) into (qh, qs).
fn pack(code: impl Fn(usize) -> u8) -> ([u8; 4], [u8; QK / 2]) {
    let codes: [u8; QK] = std::array::from_fn(code);
    let qh = codes
        .iter()
        .enumerate()
        .fold(0u32, |h, (i, &q)| h | (u32::from(q >> 4) << i));
    let qs = std::array::from_fn(|j| (codes[j] & 0x0f) | ((codes[j + QK / 2] & 0x0f) << 4));
    (qh.to_le_bytes(), qs)
}

/// The 32 codes, in element order.
fn unpack(qh: u32, qs: &[u8; QK / 2]) -> [u8; QK] {
    std::array::from_fn(|i| {
        let low = if i < QK / 2 {
            qs[i] & 0x0f
        } else {
            qs[i - QK / 2] >> 4
        };
        low | ((((qh >> i) & 1) as u8) << 4)
    })
}

impl LegacyBlock for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;

    fn dequantize(&self, out: &mut [f32; QK]) {
        let d = self.d();
        for (o, q) in out.iter_mut().zip(unpack(self.qh(), &self.qs)) {
            *o = d * (i32::from(q) - 16) as f32;
        }
    }

    fn quantize(x: &[f32; QK]) -> Self {
        // Same scheme as Q4_0 one bit wider: the extreme value maps exactly onto code 0.
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        let (qh, qs) = pack(|j| ((x[j] * id + 16.5) as u8).min(31));
        Self {
            d: to_f16_le(d),
            qh,
            qs,
        }
    }
}

impl LegacyBlock for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;

    fn dequantize(&self, out: &mut [f32; QK]) {
        let (d, m) = (self.d(), self.m());
        for (o, q) in out.iter_mut().zip(unpack(self.qh(), &self.qs)) {
            *o = d * f32::from(q) + m;
        }
    }

    fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        let (qh, qs) = pack(|j| (((x[j] - min) * id + 0.5) as u8).min(31));
        Self {
            d: to_f16_le(d),
            m: to_f16_le(min),
            qh,
            qs,
        }
    }
}
