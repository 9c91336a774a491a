//! Q2_K: 2.625 bits per weight. Sixteen 16-value sub-blocks, each `d·sc·q - dmin·m` with
//! 4-bit `sc` and `m` and 2-bit `q`.

use super::search::{fit_affine, nearest_int, AffineSearch};
use super::{pack_2bit, SuperBlock, QK_K};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};
use half::f16;

/// ggml's `block_q2_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ2K {
    /// Sub-block `j`: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit codes, four planes per 128 values (see `pack_2bit`).
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the 4-bit scales.
    pub d: f16,
    /// Super-block scale for the 4-bit mins.
    pub dmin: f16,
}

/// With only 4 levels the grid search is coarse, so it weighs absolute errors, which keeps
/// a single outlier from dragging the whole sub-block's scale.
const SEARCH: AffineSearch = AffineSearch {
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: true,
};

impl SuperBlock for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2K;

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        // Walk the 2-bit planes: value 128h + 32k + l sits in qs[32h + l] at bits 2k.
        for (h, (out, qs)) in out
            .chunks_exact_mut(128)
            .zip(self.qs.chunks_exact(32))
            .enumerate()
        {
            for (k, out) in out.chunks_exact_mut(32).enumerate() {
                for (s, (out, qs)) in out
                    .chunks_exact_mut(16)
                    .zip(qs.chunks_exact(16))
                    .enumerate()
                {
                    let sc = self.scales[8 * h + 2 * k + s];
                    let dl = d * f32::from(sc & 0xF);
                    let ml = dmin * f32::from(sc >> 4);
                    for (y, &b) in out.iter_mut().zip(qs) {
                        *y = dl * f32::from((b >> (2 * k)) & 3) - ml;
                    }
                }
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut codes = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        for j in 0..16 {
            let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().unwrap();
            let weights: [f32; 16] = std::array::from_fn(|l| xs[l].abs());
            let sub: &mut [u8; 16] = (&mut codes[16 * j..16 * j + 16]).try_into().unwrap();
            (scales[j], mins[j]) = fit_affine(xs, &weights, 3, &SEARCH, sub);
        }

        let max_scale = scales
            .iter()
            .fold(0.0f32, |m, &s| if s > m { s } else { m });
        let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
        let mut packed = [0u8; 16];
        let mut d = f16::ZERO;
        let mut dmin = f16::ZERO;
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (p, &s) in packed.iter_mut().zip(&scales) {
                *p = nearest_int(iscale * s).clamp(0, 15) as u8;
            }
            d = f16::from_f32(max_scale / 15.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (p, &m) in packed.iter_mut().zip(&mins) {
                *p |= (nearest_int(iscale * m).clamp(0, 15) as u8) << 4;
            }
            dmin = f16::from_f32(max_min / 15.0);
        }

        // Re-fit the codes to the scales as stored; zero-scale sub-blocks keep the search's.
        for (j, &sc) in packed.iter().enumerate() {
            let dl = d.to_f32() * f32::from(sc & 0xF);
            if dl == 0.0 {
                continue;
            }
            let ml = dmin.to_f32() * f32::from(sc >> 4);
            for i in 16 * j..16 * j + 16 {
                codes[i] = nearest_int((x[i] + ml) / dl).clamp(0, 3) as u8;
            }
        }
        BlockQ2K {
            scales: packed,
            qs: pack_2bit(&codes),
            d,
            dmin,
        }
    }
}
