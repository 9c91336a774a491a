//! Q6_K: 6.5625 bits per weight. Sixteen 16-value sub-blocks, each `d·sc·q` with a signed
//! 8-bit `sc` and a signed 6-bit `q` (4 low bits in `ql`, 2 high bits in `qh`).

use super::search::{fit_symmetric_grid, nearest_int, GROUP_MAX_EPS};
use super::{SuperBlock, QK_K};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};
use half::f16;

/// ggml's `block_q6_K`. Codes are stored offset by +32.
///
/// Within each half `h` of 128 values, value `128h + 32k + l` (`k` in 0..4, `l` in 0..32) has
/// its low nibble in `ql[64h + l + 32·(k % 2)]` (low nibble for `k < 2`, high for `k ≥ 2`) and
/// its top 2 bits in `qh[32h + l]` at bits `2k`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    /// Per 16-value sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}

impl BlockQ6K {
    /// The signed code of value `i` (0..256), in -32..=31.
    #[inline]
    pub fn code(&self, i: usize) -> i8 {
        let (h, k, l) = (i / 128, (i % 128) / 32, i % 32);
        let low = (self.ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
        let high = (self.qh[32 * h + l] >> (2 * k)) & 3;
        (low | (high << 4)) as i8 - 32
    }
}

impl SuperBlock for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6K;

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (j, chunk) in out.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(self.scales[j]);
            for (k, y) in chunk.iter_mut().enumerate() {
                *y = dl * f32::from(self.code(16 * j + k));
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut codes = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().unwrap();
            let sub: &mut [i8; 16] = (&mut codes[16 * j..16 * j + 16]).try_into().unwrap();
            scales[j] = fit_symmetric_grid(xs, 32, sub);
            if scales[j].abs() > max_abs {
                max_abs = scales[j].abs();
                max_scale = scales[j];
            }
        }
        if max_abs < GROUP_MAX_EPS {
            return BlockQ6K::zeroed();
        }

        // The signed scale of largest magnitude maps to -128, so the i8 range is used fully.
        let iscale = -128.0 / max_scale;
        let mut block = BlockQ6K::zeroed();
        block.d = f16::from_f32(1.0 / iscale);
        for (s, &v) in block.scales.iter_mut().zip(&scales) {
            *s = nearest_int(iscale * v).min(127) as i8;
        }

        // Re-fit the codes to the scales as stored; zero-scale sub-blocks keep the search's.
        let d = block.d.to_f32();
        for j in 0..16 {
            let dl = d * f32::from(block.scales[j]);
            if dl == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                codes[i] = (nearest_int(x[i] / dl).clamp(-32, 31) + 32) as i8;
            }
        }

        for h in 0..2 {
            let c = |k: usize, l: usize| codes[128 * h + 32 * k + l] as u8;
            for l in 0..32 {
                block.ql[64 * h + l] = (c(0, l) & 0xF) | ((c(2, l) & 0xF) << 4);
                block.ql[64 * h + l + 32] = (c(1, l) & 0xF) | ((c(3, l) & 0xF) << 4);
                block.qh[32 * h + l] = (c(0, l) >> 4)
                    | ((c(1, l) >> 4) << 2)
                    | ((c(2, l) >> 4) << 4)
                    | ((c(3, l) >> 4) << 6);
            }
        }
        block
    }
}
