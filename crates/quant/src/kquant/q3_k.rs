//! Q3_K: 3.4375 bits per weight. Sixteen 16-value sub-blocks, each `d·sc·q` with a signed
//! 6-bit `sc` and a signed 3-bit `q` (2 low bits in `qs`, the high bit in `hmask`).

use super::search::{fit_symmetric_descent, nearest_int};
use super::{pack_2bit, SuperBlock, QK_K};
use crate::GgmlType;
use bytemuck::{Pod, Zeroable};
use half::f16;

/// ggml's `block_q3_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ3K {
    /// Bit `i / 32` of byte `i % 32` is the high bit of value `i`; a *clear* bit means the
    /// value is 4 lower (codes are stored offset by +4, so the bit is just bit 2 of the code).
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of each code, four planes per 128 values (see `pack_2bit`).
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales stored +32: low nibbles in bytes 0-7 (sub-blocks 0-7 in the low
    /// halves, 8-15 in the high halves), top 2 bits in bytes 8-11 (sub-block `j` at byte
    /// `8 + j % 4`, bits `2·(j / 4)`).
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}

impl BlockQ3K {
    /// The signed scale of sub-block `j` (0..16), in -32..=31.
    #[inline]
    pub fn scale(&self, j: usize) -> i8 {
        let low = if j < 8 {
            self.scales[j] & 0xF
        } else {
            self.scales[j - 8] >> 4
        };
        let high = (self.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    }
}

fn pack_scales(ls: &[u8; 16]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for (j, &l) in ls.iter().enumerate() {
        q[j % 8] |= (l & 0xF) << (4 * (j / 8));
        q[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    q
}

impl SuperBlock for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3K;

    fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        // Walk the 2-bit planes: value 128h + 32k + l sits in qs[32h + l] at bits 2k, and
        // its high bit in hmask[l] at bit 4h + k.
        for (h, (out, qs)) in out
            .chunks_exact_mut(128)
            .zip(self.qs.chunks_exact(32))
            .enumerate()
        {
            for (k, out) in out.chunks_exact_mut(32).enumerate() {
                let hbit = 4 * h + k;
                for (s, out) in out.chunks_exact_mut(16).enumerate() {
                    let dl = d * f32::from(self.scale(8 * h + 2 * k + s));
                    let (qs, hm) = (&qs[16 * s..16 * s + 16], &self.hmask[16 * s..16 * s + 16]);
                    for ((y, &b), &m) in out.iter_mut().zip(qs).zip(hm) {
                        let high_clear = (m >> hbit) & 1 == 0;
                        let q = ((b >> (2 * k)) & 3) as i8 - if high_clear { 4 } else { 0 };
                        *y = dl * f32::from(q);
                    }
                }
            }
        }
    }

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut codes = [0i8; QK_K];
        let mut scales = [0f32; 16];
        // Signed scale of largest magnitude: mapping it to -32 uses the full 6-bit range
        // (-32..=31) on the side that needs it.
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().unwrap();
            let sub: &mut [i8; 16] = (&mut codes[16 * j..16 * j + 16]).try_into().unwrap();
            scales[j] = fit_symmetric_descent(xs, 4, sub);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }

        let mut block = BlockQ3K::zeroed();
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            let ls: [u8; 16] = std::array::from_fn(|j| {
                // ggml narrows to int8 before clamping; in range that is a no-op.
                let l = i32::from(nearest_int(iscale * scales[j]) as i8);
                (l.clamp(-32, 31) + 32) as u8
            });
            block.scales = pack_scales(&ls);
            block.d = f16::from_f32(1.0 / iscale);
        }

        // Re-fit the codes to the scales as stored; zero-scale sub-blocks keep the search's.
        let d = block.d.to_f32();
        for j in 0..16 {
            let dl = d * f32::from(block.scale(j));
            if dl == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                codes[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as i8;
            }
        }

        let mut low = [0u8; QK_K];
        for (i, (&c, l)) in codes.iter().zip(&mut low).enumerate() {
            if c > 3 {
                block.hmask[i % 32] |= 1 << (i / 32);
            }
            *l = c as u8 & 3;
        }
        block.qs = pack_2bit(&low);
        block
    }
}
