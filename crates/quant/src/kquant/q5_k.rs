//! Q5_K: 5.5 bits per weight. Eight 32-value sub-blocks, each `d·sc·q - dmin·m` with 6-bit
//! `sc` and `m` and 5-bit `q` (4 low bits as in Q4_K, the fifth in `qh`).

use super::search::AffineSearch;
use super::{quantize_affine_32, scale_min, SuperBlock, QK_K};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};
use half::f16;

/// ggml's `block_q5_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5K {
    /// Super-block scale for the 6-bit scales.
    pub d: f16,
    /// Super-block scale for the 6-bit mins.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit mins, packed as in Q4_K.
    pub scales: [u8; 12],
    /// Bit `i / 32` of byte `i % 32` is the fifth bit of value `i`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of each code, laid out as Q4_K's `qs`.
    pub qs: [u8; QK_K / 2],
}

impl BlockQ5K {
    /// The 6-bit scale and min of sub-block `j` (0..8).
    #[inline]
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        scale_min(&self.scales, j)
    }
}

const SEARCH: AffineSearch = AffineSearch {
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: false,
};

impl SuperBlock for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5K;

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        for (j, chunk) in out.chunks_exact_mut(32).enumerate() {
            let (sc, m) = self.scale_min(j);
            let dl = d * f32::from(sc);
            let ml = dmin * f32::from(m);
            let (bytes, shift) = (&self.qs[32 * (j / 2)..][..32], 4 * (j % 2));
            for (l, (y, &b)) in chunk.iter_mut().zip(bytes).enumerate() {
                let q = ((b >> shift) & 0xF) | (((self.qh[l] >> j) & 1) << 4);
                *y = dl * f32::from(q) - ml;
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Self {
        let fit = quantize_affine_32(x, 31, &SEARCH);
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        for (g, codes) in fit.codes.chunks_exact(64).enumerate() {
            for l in 0..32 {
                let (lo, hi) = (codes[l], codes[l + 32]);
                qs[32 * g + l] = (lo & 0xF) | ((hi & 0xF) << 4);
                qh[l] |= ((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1));
            }
        }
        BlockQ5K {
            d: fit.d,
            dmin: fit.dmin,
            scales: fit.scales,
            qh,
            qs,
        }
    }
}
