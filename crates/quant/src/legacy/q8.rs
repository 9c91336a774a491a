//! Q8_0 (weights) and Q8_1 (activations): one signed byte per element.

use super::{f16_le, inverse, to_f16_le, LegacyBlock, QK};
use crate::{q8simd, GgmlType};
use bytemuck::{Pod, Zeroable};

/// Q8_0, 34 bytes: `x = d * q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Codes, i8 stored as bytes (`as i8` to read).
    pub qs: [u8; QK],
}

/// Q8_1, 36 bytes: `x = d * q`, plus `s = d * sum(q)` so that dot products against offset
/// formats (Q4_1, Q5_1) can apply the offset once per block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// `d * sum(qs)`, f16, computed from the unrounded f32 scale.
    pub s: [u8; 2],
    /// Codes, i8 stored as bytes (`as i8` to read).
    pub qs: [u8; QK],
}

impl BlockQ8_0 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    pub fn codes(&self) -> &[i8; QK] {
        bytemuck::cast_ref(&self.qs)
    }

    /// ggml's x86 `quantize_row_q8_0` (the AVX/AVX2 build's `from_float` for Q8_0: how
    /// llama.cpp's CPU backend quantizes matmul activations for Q4_0/Q5_0/Q8_0 weights, and
    /// its quantized KV cache): the same `d = absmax / 127`, but codes `x · (127 / absmax)`
    /// rounded half to even (`_mm256_round_ps`), where the reference
    /// ([`LegacyBlock::quantize`], which writes weights) multiplies by `1 / d` and rounds half
    /// away from zero. The two differ by one code now and then.
    pub fn quantize_x86(x: &[f32; QK]) -> Self {
        let (d, qs, _) = x86_codes(x);
        Self {
            d: to_f16_le(d),
            qs,
        }
    }
}

/// (f32 scale, codes, sum of codes) as ggml's x86 Q8_0/Q8_1 activation quantizers make them.
fn x86_codes(x: &[f32; QK]) -> (f32, [u8; QK], i32) {
    let amax = q8simd::absmax(x);
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut codes = [0i8; QK];
    let sum = q8simd::round_even(x, id, &mut codes);
    (amax / 127.0, bytemuck::cast(codes), sum)
}

impl BlockQ8_1 {
    /// ggml's x86 `quantize_row_q8_1` (activations for Q4_1/Q5_1 weights): codes as
    /// [`BlockQ8_0::quantize_x86`], `s = d · Σ codes` in f16.
    pub fn quantize_x86(x: &[f32; QK]) -> Self {
        let (d, qs, sum) = x86_codes(x);
        Self {
            d: to_f16_le(d),
            s: to_f16_le(d * sum as f32),
            qs,
        }
    }

    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    pub fn s(&self) -> f32 {
        f16_le(self.s)
    }

    pub fn codes(&self) -> &[i8; QK] {
        bytemuck::cast_ref(&self.qs)
    }
}

/// (f32 scale, codes, sum of codes): symmetric absmax / 127, rounding half away from zero like
/// C `roundf`.
fn quantize_codes(x: &[f32; QK]) -> (f32, [u8; QK], i32) {
    let d = q8simd::absmax(x) / 127.0;
    let id = inverse(d);
    let mut codes = [0i8; QK];
    let sum = q8simd::round_away(x, id, &mut codes);
    (d, bytemuck::cast(codes), sum)
}

fn dequantize_codes(d: f32, codes: &[i8; QK], out: &mut [f32; QK]) {
    for (o, &q) in out.iter_mut().zip(codes) {
        *o = f32::from(q) * d;
    }
}

impl LegacyBlock for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;

    fn dequantize(&self, out: &mut [f32; QK]) {
        dequantize_codes(self.d(), self.codes(), out);
    }

    fn quantize(x: &[f32; QK]) -> Self {
        let (d, qs, _) = quantize_codes(x);
        Self {
            d: to_f16_le(d),
            qs,
        }
    }
}

impl LegacyBlock for BlockQ8_1 {
    const TYPE: GgmlType = GgmlType::Q8_1;

    /// `s` is redundant for the values themselves and is ignored here.
    fn dequantize(&self, out: &mut [f32; QK]) {
        dequantize_codes(self.d(), self.codes(), out);
    }

    fn quantize(x: &[f32; QK]) -> Self {
        let (d, qs, sum) = quantize_codes(x);
        Self {
            d: to_f16_le(d),
            s: to_f16_le(sum as f32 * d),
            qs,
        }
    }
}
