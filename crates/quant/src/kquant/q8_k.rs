//! Q8_K: the activation format K-quant dot products pair with. One f32 scale, 8-bit codes,
//! and per-16 code sums so kernels can apply the weight's `-dmin·m` term without a pass over
//! the codes.

use super::{SuperBlock, QK_K};
use crate::{q8simd, GgmlType};
use bytemuck::{Pod, Zeroable};

/// ggml's `block_q8_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8K {
    /// Scale: value `i` is `d·qs[i]`.
    pub d: f32,
    pub qs: [i8; QK_K],
    /// `bsums[j]` is the sum of `qs[16j..16j + 16]`.
    pub bsums: [i16; QK_K / 16],
}

impl SuperBlock for BlockQ8K {
    const TYPE: GgmlType = GgmlType::Q8K;

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        for (y, &q) in out.iter_mut().zip(&self.qs) {
            *y = self.d * f32::from(q);
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Self {
        // The first value of largest magnitude, as ggml's strict `>` scan finds it.
        let max = q8simd::first_absmax(x);
        let mut block = BlockQ8K::zeroed();
        if max == 0.0 {
            return block;
        }
        // The value of largest magnitude maps to -127, not -128: codes stay in -127..=127,
        // which lets SIMD dot kernels negate or take |q| without overflow.
        let iscale = -127.0 / max;
        // `nearest_int(iscale * v).min(127) as i8` for each v.
        q8simd::nearest(x, iscale, &mut block.qs);
        // `bsums[j]`: the i16 sum of `qs[16j..16j + 16]`.
        block.bsums = q8simd::sums16(&block.qs);
        block.d = 1.0 / iscale;
        block
    }
}
