//! The 256-element super-block formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
//!
//! Each type has its own file with a `#[repr(C)]` bytemuck block struct that *is* the on-disk
//! layout, and [`SuperBlock`] `dequantize`/`quantize` on it. GGUF stores little-endian data and
//! the structs are read in place, so these views assume a little-endian host.
//!
//! Dequantization is bit-exact with ggml (and gguf-py): every product is an f32 product in
//! ggml's order, e.g. `(d·scale)·q - dmin·min`, never fused. Quantization reproduces
//! llama.cpp's reference quantizers; the shared searches live in [`search`].

mod q2_k;
mod q3_k;
mod q4_k;
mod q5_k;
mod q6_k;
mod q8_k;
mod search;

pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_k::BlockQ4K;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_k::BlockQ8K;

use crate::{Codec, GgmlType};

// The block structs are read in place from little-endian GGUF data.
#[cfg(target_endian = "big")]
compile_error!("ferrolm's K-quant block views assume a little-endian host");
use bytemuck::Pod;
use search::{fit_affine, nearest_int, AffineSearch};

/// Elements per super-block.
pub const QK_K: usize = 256;

/// A K-quant super-block: its layout is the struct, and these are its only conversions.
pub trait SuperBlock: Pod {
    const TYPE: GgmlType;
    /// Decodes the block into its 256 values.
    fn dequantize(&self, out: &mut [f32; QK_K]);
    /// Encodes 256 values the way llama.cpp's reference quantizer does.
    fn quantize(x: &[f32; QK_K]) -> Self;
}

pub(crate) const CODECS: &[Codec] = &[
    codec::<BlockQ2K>(),
    codec::<BlockQ3K>(),
    codec::<BlockQ4K>(),
    codec::<BlockQ5K>(),
    codec::<BlockQ6K>(),
    codec::<BlockQ8K>(),
];

const fn codec<B: SuperBlock>() -> Codec {
    // The struct must be exactly ggml's block, or every typed view would be wrong.
    assert!(size_of::<B>() == B::TYPE.block_geometry().1);
    assert!(B::TYPE.block_geometry().0 == QK_K);
    Codec {
        ty: B::TYPE,
        dequantize_block: dequantize_bytes::<B>,
        quantize_block: quantize_bytes::<B>,
    }
}

fn dequantize_bytes<B: SuperBlock>(block: &[u8], out: &mut [f32]) {
    let out: &mut [f32; QK_K] = out.try_into().expect("a K-quant block holds 256 values");
    // Blocks inside a tensor need not be aligned for B (e.g. 110-byte Q3_K blocks), so fall
    // back to a copy when a zero-copy view is impossible.
    match bytemuck::try_from_bytes::<B>(block) {
        Ok(b) => b.dequantize(out),
        Err(_) => bytemuck::pod_read_unaligned::<B>(block).dequantize(out),
    }
}

fn quantize_bytes<B: SuperBlock>(x: &[f32], out: &mut [u8]) {
    let x: &[f32; QK_K] = x.try_into().expect("a K-quant block holds 256 values");
    out.copy_from_slice(bytemuck::bytes_of(&B::quantize(x)));
}

/// Packs eight 6-bit scales and eight 6-bit mins into Q4_K/Q5_K's 12 bytes.
///
/// Bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; bytes 8-11 hold the
/// low nibbles of scale/min 4-7, whose top 2 bits go into the spare top bits of bytes 0-7.
fn pack_scales_mins(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = scales[j] | ((scales[j + 4] >> 4) << 6);
        q[j + 4] = mins[j] | ((mins[j + 4] >> 4) << 6);
        q[j + 8] = (scales[j + 4] & 0xF) | ((mins[j + 4] & 0xF) << 4);
    }
    q
}

/// Scale and min of sub-block `j` (0..8) from Q4_K/Q5_K's 12 packed bytes.
#[inline]
fn scale_min(q: &[u8; 12], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// What Q4_K and Q5_K share: eight 32-value sub-blocks, each `d·sc·L - dmin·m`, with 6-bit
/// `sc`/`m` and codes `L` in `0..=nmax`.
struct AffineSuperBlock {
    d: half::f16,
    dmin: half::f16,
    scales: [u8; 12],
    codes: [u8; QK_K],
}

/// Quantizes one super-block for Q4_K (`nmax` 15) or Q5_K (`nmax` 31).
fn quantize_affine_32(x: &[f32; QK_K], nmax: u8, search: &AffineSearch) -> AffineSuperBlock {
    let mut codes = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for j in 0..8 {
        let xs: &[f32; 32] = x[32 * j..32 * j + 32].try_into().unwrap();
        // Weight each value by its magnitude plus the sub-block's RMS, so large weights get
        // more care without letting the small ones go entirely.
        let sum_x2 = xs.iter().fold(0.0f32, |s, &v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
        let sub: &mut [u8; 32] = (&mut codes[32 * j..32 * j + 32]).try_into().unwrap();
        (scales[j], mins[j]) = fit_affine(xs, &weights, nmax, search, sub);
    }

    // Scales and mins are all ≥ 0, so each set maps linearly onto 0..=63 against its max.
    let max_scale = scales
        .iter()
        .fold(0.0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let ls: [u8; 8] = std::array::from_fn(|j| to_6bit(nearest_int(inv_scale * scales[j])));
    let lm: [u8; 8] = std::array::from_fn(|j| to_6bit(nearest_int(inv_min * mins[j])));
    let packed = pack_scales_mins(&ls, &lm);
    let d = half::f16::from_f32(max_scale / 63.0);
    let dmin = half::f16::from_f32(max_min / 63.0);

    // Re-derive the codes against the scales as actually stored (6-bit, f16), which is what
    // the dequantizer will use. Sub-blocks whose stored scale is 0 keep the search's codes.
    for j in 0..8 {
        let (sc, m) = scale_min(&packed, j);
        let dl = d.to_f32() * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        let ml = dmin.to_f32() * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            codes[i] = nearest_int((x[i] + ml) / dl).clamp(0, i32::from(nmax)) as u8;
        }
    }
    AffineSuperBlock {
        d,
        dmin,
        scales: packed,
        codes,
    }
}

/// ggml stores `nearest_int` into a `uint8_t` and then takes `MIN(63, ·)`; in range the
/// value is already 0..=63, this only keeps a pathological input from spilling into other bits.
fn to_6bit(v: i32) -> u8 {
    (v as u8).min(63)
}

/// Stores four 2-bit planes the way Q2_K and Q3_K lay them out: within each half of 128
/// values, byte `l` holds values `l`, `l+32`, `l+64`, `l+96` in bits 0-1, 2-3, 4-5, 6-7.
fn pack_2bit(codes: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for (h, half) in codes.chunks_exact(128).enumerate() {
        for l in 0..32 {
            qs[32 * h + l] = (half[l] & 3)
                | ((half[l + 32] & 3) << 2)
                | ((half[l + 64] & 3) << 4)
                | ((half[l + 96] & 3) << 6);
        }
    }
    qs
}
