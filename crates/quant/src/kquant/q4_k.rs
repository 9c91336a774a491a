//! Q4_K: 4.5 bits per weight. Eight 32-value sub-blocks, each `d·sc·q - dmin·m` with 6-bit
//! `sc` and `m` and 4-bit `q`.

use super::search::AffineSearch;
use super::{quantize_affine_32, scale_min, SuperBlock, QK_K};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};
use half::f16;

/// ggml's `block_q4_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4K {
    /// Super-block scale for the 6-bit scales.
    pub d: f16,
    /// Super-block scale for the 6-bit mins.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit mins (see [`BlockQ4K::scale_min`]).
    pub scales: [u8; 12],
    /// 4-bit codes: byte `l` of each 32-byte group `g` holds value `64g + l` in the low nibble
    /// and `64g + 32 + l` in the high nibble.
    pub qs: [u8; QK_K / 2],
}

impl BlockQ4K {
    /// The 6-bit scale and min of sub-block `j` (0..8).
    #[inline]
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        scale_min(&self.scales, j)
    }
}

/// Sixteen levels leave room for a finer, wider search than Q5_K's.
const SEARCH: AffineSearch = AffineSearch {
    rmin: -1.0,
    rdelta: 0.1,
    nstep: 20,
    use_mad: false,
};

impl SuperBlock for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4K;

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        for (j, chunk) in out.chunks_exact_mut(32).enumerate() {
            let (sc, m) = self.scale_min(j);
            let dl = d * f32::from(sc);
            let ml = dmin * f32::from(m);
            let (bytes, shift) = (&self.qs[32 * (j / 2)..][..32], 4 * (j % 2));
            for (y, &b) in chunk.iter_mut().zip(bytes) {
                *y = dl * f32::from((b >> shift) & 0xF) - ml;
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Self {
        let fit = quantize_affine_32(x, 15, &SEARCH);
        let mut qs = [0u8; QK_K / 2];
        for (g, codes) in fit.codes.chunks_exact(64).enumerate() {
            for l in 0..32 {
                qs[32 * g + l] = codes[l] | (codes[l + 32] << 4);
            }
        }
        BlockQ4K {
            d: fit.d,
            dmin: fit.dmin,
            scales: fit.scales,
            qs,
        }
    }
}
