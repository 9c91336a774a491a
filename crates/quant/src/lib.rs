//! ggml block formats. Each type's layout, dequantize and quantize are defined once here, and
//! every other part of ferrolm (CPU kernels, CUDA uploads, tests, tools) goes through them.
//!
//! A format is a [`Codec`]: two functions over one block. The slice-level entry points below
//! check lengths once and fan blocks out over rayon.

mod float;
mod kquant;
mod legacy;
mod mxfp4;
mod q8simd;

pub use ferrolm_gguf::GgmlType;
pub use kquant::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, SuperBlock, QK_K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, LegacyBlock};
pub use mxfp4::{e8m0_to_f32_half, BlockMxfp4, KVALUES as MXFP4_VALUES, QK_MXFP4};
use rayon::prelude::*;

/// One block format: how a block of `ty.block_elems()` floats maps to `ty.block_bytes()` bytes.
pub struct Codec {
    pub ty: GgmlType,
    /// `block.len() == ty.block_bytes()`, `out.len() == ty.block_elems()`.
    pub dequantize_block: fn(block: &[u8], out: &mut [f32]),
    /// `x.len() == ty.block_elems()`, `out.len() == ty.block_bytes()`.
    pub quantize_block: fn(x: &[f32], out: &mut [u8]),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    #[error("tensor type {0} is not supported by ferrolm's block formats")]
    Unsupported(GgmlType),
    #[error("{ty}: {elems} elements is not a whole number of {block}-element blocks")]
    PartialBlock {
        ty: GgmlType,
        elems: usize,
        block: usize,
    },
    #[error("{ty}: {elems} elements need {expected} bytes, got {got}")]
    SizeMismatch {
        ty: GgmlType,
        elems: usize,
        expected: usize,
        got: usize,
    },
}

/// The codec for `ty`, if ferrolm implements it.
pub fn codec(ty: GgmlType) -> Result<&'static Codec, QuantError> {
    float::CODECS
        .iter()
        .chain(legacy::CODECS)
        .chain(kquant::CODECS)
        .chain(mxfp4::CODECS)
        .find(|c| c.ty == ty)
        .ok_or(QuantError::Unsupported(ty))
}

/// Types ferrolm can both read and write.
pub fn supported_types() -> impl Iterator<Item = GgmlType> {
    float::CODECS
        .iter()
        .chain(legacy::CODECS)
        .chain(kquant::CODECS)
        .chain(mxfp4::CODECS)
        .map(|c| c.ty)
}

fn check_sizes(ty: GgmlType, elems: usize, bytes: usize) -> Result<(), QuantError> {
    let (block, block_bytes) = ty.block_geometry();
    if !elems.is_multiple_of(block) {
        return Err(QuantError::PartialBlock { ty, elems, block });
    }
    let expected = elems / block * block_bytes;
    if bytes != expected {
        return Err(QuantError::SizeMismatch {
            ty,
            elems,
            expected,
            got: bytes,
        });
    }
    Ok(())
}

/// Blocks handed to one rayon task: large enough that scheduling cost stays negligible, also
/// for the one-element "blocks" of the float formats.
fn blocks_per_task(elems_per_block: usize) -> usize {
    (8192 / elems_per_block).max(64)
}

/// Dequantizes `src` (whole blocks of `ty`) into `dst`, in parallel.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let codec = codec(ty)?;
    check_sizes(ty, dst.len(), src.len())?;
    let (be, bb) = ty.block_geometry();
    let per_task = blocks_per_task(be);
    src.par_chunks(bb * per_task)
        .zip(dst.par_chunks_mut(be * per_task))
        .for_each(|(s, d)| {
            // Float formats convert whole rows at once rather than a call per element.
            if float::dequantize_row(ty, s, d) {
                return;
            }
            for (block, out) in s.chunks_exact(bb).zip(d.chunks_exact_mut(be)) {
                (codec.dequantize_block)(block, out);
            }
        });
    Ok(())
}

/// Quantizes `src` into whole blocks of `ty` in `dst`, in parallel.
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let codec = codec(ty)?;
    check_sizes(ty, src.len(), dst.len())?;
    let (be, bb) = ty.block_geometry();
    let per_task = blocks_per_task(be);
    src.par_chunks(be * per_task)
        .zip(dst.par_chunks_mut(bb * per_task))
        .for_each(|(s, d)| {
            if float::quantize_row(ty, s, d) {
                return;
            }
            for (x, out) in s.chunks_exact(be).zip(d.chunks_exact_mut(bb)) {
                (codec.quantize_block)(x, out);
            }
        });
    Ok(())
}

/// Quantizes into a fresh buffer.
pub fn quantize_to_vec(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let (be, bb) = ty.block_geometry();
    if !src.len().is_multiple_of(be) {
        return Err(QuantError::PartialBlock {
            ty,
            elems: src.len(),
            block: be,
        });
    }
    let mut out = vec![0u8; src.len() / be * bb];
    quantize(ty, src, &mut out)?;
    Ok(out)
}

/// Dequantizes into a fresh buffer of `elems` floats.
pub fn dequantize_to_vec(ty: GgmlType, src: &[u8], elems: usize) -> Result<Vec<f32>, QuantError> {
    let mut out = vec![0f32; elems];
    dequantize(ty, src, &mut out)?;
    Ok(out)
}
