//! Every quantized weight format as the kernels see it, defined once and shared by all levels.
//!
//! A block is split into units of `UNIT` (16 or 32) elements that share a scale and an offset:
//! element `i` of unit `u` is `scale[u] · (code[i] - BIAS) + off[u]`, with `code` an unsigned
//! byte, so every kernel multiplies unsigned weight bytes by signed activation bytes, which is
//! what `vpdpbusd` and `vpmaddubsw` do.
//!
//! Symmetric formats store their codes with a constant bias (Q4_0: q + 8, Q5_0: q + 16,
//! Q8_0: q + 128, Q3_K: q + 4, Q6_K: q + 32) and have no offset: kernels take `BIAS · Σ x` off
//! the integer dot, which keeps it exact (`Σ q·x`, as llama.cpp computes it). Formats with a
//! minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) have `BIAS = 0` and an f32 offset per unit, which
//! multiplies the activation's `d · Σ x`.
//!
//! `scale` and `off` are computed exactly as the dequantizers in `ferrolm_quant` compute their
//! `d·sc` and `dmin·m` (the same f32 products), so the fast path multiplies the very operands
//! the reference does.

use ferrolm_gguf::GgmlType;
use ferrolm_quant::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8_0,
};

pub(super) trait Format: Send + Sync + 'static {
    const TY: GgmlType;
    type Block: bytemuck::Pod + Send + Sync;
    /// Elements per block: 32 or 256.
    const ELEMS: usize;
    /// Elements per unit: 32, or 16 for the K-quants with 16-element sub-blocks.
    const UNIT: usize;
    /// Codes may exceed 127 (Q8_0): AVX2's pairwise 16-bit sums could saturate on them.
    const WIDE: bool = false;
    /// The constant the codes are stored above (symmetric formats), else 0.
    const BIAS: i32 = 0;

    /// The block's units' scales and offsets (`ELEMS / UNIT` of each). `h` converts f16 bits.
    fn params(b: &Self::Block, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]);

    /// The block's codes in element order (`ELEMS` bytes).
    fn codes(b: &Self::Block, out: &mut [u8]);

    /// Integer-scale order (Q4_K): instead of one f32 step per unit, the unit dots are
    /// multiplied by their 6-bit scales in integers and summed over a pair of units (64
    /// elements) or over the whole block, converted once and multiplied by `d·dx`; the mins
    /// likewise (`Σ m·Σx`, exact) by `dmin·dx` into a second accumulator, subtracted at the end.
    /// This is the arithmetic of llama.cpp's x86 kernels for its repacked Q4_K weights: pairs
    /// in its tiled kernel, blocks in its one-row kernel (see `matmul::Order`).
    const INT_SCALES: bool = false;

    /// Eight-lane order (Q8_0, Q5_0): each output keeps eight f32 lanes, lane `l` taking the integer
    /// dot of elements `4l..4l + 4` of every block, added as `fma(scale·dx, dot, lane)`, and
    /// the lanes are folded at the end as `((0+4) + (2+6)) + ((1+5) + (3+7))`. This is the
    /// arithmetic of every Q8_0 dot in llama.cpp's x86 build: its prefill matmul (llamafile's
    /// tiled kernel, taken for two tokens or more) and its row dot (decode, experts) alike.
    /// See `matmul::lanes`.
    const LANES: bool = false;

    /// For `INT_SCALES` formats: the block's `(d, dmin)`, and per unit (`ELEMS / UNIT`) the
    /// integer scale and min.
    fn int_params(
        _b: &Self::Block,
        _h: impl Fn(u16) -> f32,
        _sc: &mut [i32],
        _m: &mut [i32],
    ) -> (f32, f32) {
        unreachable!("{} has no integer scales", Self::TY)
    }
}

fn f16_le(b: [u8; 2]) -> u16 {
    u16::from_le_bytes(b)
}

/// Nibble `i` of a Q4-style 16-byte array: low nibbles hold elements 0..16, high 16..32.
fn nibble(qs: &[u8; 16], i: usize) -> u8 {
    (qs[i % 16] >> (4 * (i / 16))) & 0xF
}

pub(super) struct Q4_0;
pub(super) struct Q4_1;
pub(super) struct Q5_0;
pub(super) struct Q5_1;
pub(super) struct Q8_0;
pub(super) struct Q2K;
pub(super) struct Q3K;
pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

impl Format for Q4_0 {
    const TY: GgmlType = GgmlType::Q4_0;
    const BIAS: i32 = 8;
    type Block = BlockQ4_0;
    const ELEMS: usize = 32;
    const UNIT: usize = 32;
    fn params(b: &BlockQ4_0, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        (scale[0], off[0]) = (h(f16_le(b.d)), 0.0);
    }
    fn codes(b: &BlockQ4_0, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = nibble(&b.qs, i);
        }
    }
}

impl Format for Q4_1 {
    const TY: GgmlType = GgmlType::Q4_1;
    type Block = BlockQ4_1;
    const ELEMS: usize = 32;
    const UNIT: usize = 32;
    fn params(b: &BlockQ4_1, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        (scale[0], off[0]) = (h(f16_le(b.d)), h(f16_le(b.m)));
    }
    fn codes(b: &BlockQ4_1, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = nibble(&b.qs, i);
        }
    }
}

impl Format for Q5_0 {
    const TY: GgmlType = GgmlType::Q5_0;
    const BIAS: i32 = 16;
    /// llama.cpp's x86 Q5_0 dot (`ggml_vec_dot_q5_0_q8_0`, and llamafile's tiled prefill) has
    /// Q8_0's eight lanes.
    const LANES: bool = true;
    type Block = BlockQ5_0;
    const ELEMS: usize = 32;
    const UNIT: usize = 32;
    fn params(b: &BlockQ5_0, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        (scale[0], off[0]) = (h(f16_le(b.d)), 0.0);
    }
    fn codes(b: &BlockQ5_0, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = nibble(&b.qs, i) | ((((b.qh() >> i) & 1) as u8) << 4);
        }
    }
}

impl Format for Q5_1 {
    const TY: GgmlType = GgmlType::Q5_1;
    type Block = BlockQ5_1;
    const ELEMS: usize = 32;
    const UNIT: usize = 32;
    fn params(b: &BlockQ5_1, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        (scale[0], off[0]) = (h(f16_le(b.d)), h(f16_le(b.m)));
    }
    fn codes(b: &BlockQ5_1, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = nibble(&b.qs, i) | ((((b.qh() >> i) & 1) as u8) << 4);
        }
    }
}

impl Format for Q8_0 {
    const TY: GgmlType = GgmlType::Q8_0;
    type Block = BlockQ8_0;
    const ELEMS: usize = 32;
    const UNIT: usize = 32;
    const WIDE: bool = true;
    const BIAS: i32 = 128;
    const LANES: bool = true;
    fn params(b: &BlockQ8_0, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        (scale[0], off[0]) = (h(f16_le(b.d)), 0.0);
    }
    fn codes(b: &BlockQ8_0, out: &mut [u8]) {
        // q + 128 as a byte: flipping the sign bit.
        for (o, &q) in out.iter_mut().zip(&b.qs) {
            *o = q ^ 0x80;
        }
    }
}

/// Value `i` of a 256-value K block sits in plane `(i % 128) / 32` of byte `32·(i / 128) + i % 32`
/// (Q2_K/Q3_K low bits, Q6_K high bits): the shift for plane `k` is `2k`.
fn plane(i: usize) -> (usize, usize) {
    (32 * (i / 128) + i % 32, 2 * ((i % 128) / 32))
}

impl Format for Q2K {
    const TY: GgmlType = GgmlType::Q2K;
    type Block = BlockQ2K;
    const ELEMS: usize = 256;
    const UNIT: usize = 16;
    fn params(b: &BlockQ2K, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        let (d, dmin) = (h(b.d.to_bits()), h(b.dmin.to_bits()));
        for (j, &sc) in b.scales.iter().enumerate() {
            scale[j] = d * f32::from(sc & 0xF);
            off[j] = -(dmin * f32::from(sc >> 4));
        }
    }
    fn codes(b: &BlockQ2K, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            let (at, shift) = plane(i);
            *o = (b.qs[at] >> shift) & 3;
        }
    }
}

impl Format for Q3K {
    const TY: GgmlType = GgmlType::Q3K;
    const BIAS: i32 = 4;
    type Block = BlockQ3K;
    const ELEMS: usize = 256;
    const UNIT: usize = 16;
    fn params(b: &BlockQ3K, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        let d = h(b.d.to_bits());
        for j in 0..16 {
            scale[j] = d * f32::from(b.scale(j));
            off[j] = 0.0;
        }
    }
    fn codes(b: &BlockQ3K, out: &mut [u8]) {
        // Code q + 4: the hmask bit is exactly bit 2 of it.
        for (i, o) in out.iter_mut().enumerate() {
            let (at, shift) = plane(i);
            let high = (b.hmask[i % 32] >> (i / 32)) & 1;
            *o = ((b.qs[at] >> shift) & 3) | (high << 2);
        }
    }
}

impl Format for Q4K {
    const TY: GgmlType = GgmlType::Q4K;
    type Block = BlockQ4K;
    const ELEMS: usize = 256;
    const UNIT: usize = 32;
    const INT_SCALES: bool = true;
    fn int_params(
        b: &BlockQ4K,
        h: impl Fn(u16) -> f32,
        sc: &mut [i32],
        m: &mut [i32],
    ) -> (f32, f32) {
        for j in 0..8 {
            let (s, mm) = b.scale_min(j);
            (sc[j], m[j]) = (i32::from(s), i32::from(mm));
        }
        (h(b.d.to_bits()), h(b.dmin.to_bits()))
    }
    fn params(b: &BlockQ4K, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        let (d, dmin) = (h(b.d.to_bits()), h(b.dmin.to_bits()));
        for j in 0..8 {
            let (sc, m) = b.scale_min(j);
            scale[j] = d * f32::from(sc);
            off[j] = -(dmin * f32::from(m));
        }
    }
    fn codes(b: &BlockQ4K, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            let j = i / 32;
            *o = (b.qs[32 * (j / 2) + i % 32] >> (4 * (j % 2))) & 0xF;
        }
    }
}

impl Format for Q5K {
    const TY: GgmlType = GgmlType::Q5K;
    type Block = BlockQ5K;
    const ELEMS: usize = 256;
    const UNIT: usize = 32;
    fn params(b: &BlockQ5K, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        let (d, dmin) = (h(b.d.to_bits()), h(b.dmin.to_bits()));
        for j in 0..8 {
            let (sc, m) = b.scale_min(j);
            scale[j] = d * f32::from(sc);
            off[j] = -(dmin * f32::from(m));
        }
    }
    fn codes(b: &BlockQ5K, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            let j = i / 32;
            let low = (b.qs[32 * (j / 2) + i % 32] >> (4 * (j % 2))) & 0xF;
            *o = low | (((b.qh[i % 32] >> j) & 1) << 4);
        }
    }
}

impl Format for Q6K {
    const TY: GgmlType = GgmlType::Q6K;
    const BIAS: i32 = 32;
    type Block = BlockQ6K;
    const ELEMS: usize = 256;
    const UNIT: usize = 16;
    fn params(b: &BlockQ6K, h: impl Fn(u16) -> f32, scale: &mut [f32], off: &mut [f32]) {
        let d = h(b.d.to_bits());
        for (j, &sc) in b.scales.iter().enumerate() {
            scale[j] = d * f32::from(sc);
            off[j] = 0.0;
        }
    }
    fn codes(b: &BlockQ6K, out: &mut [u8]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = (b.code(i) + 32) as u8;
        }
    }
}
