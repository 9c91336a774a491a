//! Quantizing a float GGUF model with llama.cpp's per-tensor type choices.

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::policy::{choose_types, FileType, PolicyModel, TensorRef};
use crate::stream::{decode, encode_chunks, write_streaming, Progress, CHUNK_ELEMS};
use crate::QUANTIZATION_VERSION;
use ferrolm_gguf::{GgmlType, GgufFile, GgufWriter};
use std::path::Path;

/// The output file's metadata and tensor declarations: the source's metadata (with the new
/// `general.file_type`) and its tensors in the same order, with their new types.
pub fn plan_quantize(src: &GgufFile, ftype: FileType) -> Result<GgufWriter> {
    let is_float = |t: GgmlType| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
    if let Some(t) = src.tensors().iter().find(|t| !is_float(t.ty)) {
        return Err(ModelError::Invalid(format!(
            "{} is already quantized (tensor `{}` is {}); quantize from an F32, F16 or BF16 file",
            src.path().display(),
            t.name,
            t.ty
        )));
    }
    let cfg = Config::from_gguf(src)?;
    let refs: Vec<_> = src
        .tensors()
        .iter()
        .map(|t| TensorRef {
            name: &t.name,
            dims: &t.dims,
            src: t.ty,
        })
        .collect();
    let types = choose_types(ftype, &PolicyModel::from(&cfg), &refs)?;

    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set(k, v.clone());
    }
    w.set("general.quantization_version", QUANTIZATION_VERSION);
    w.set("general.file_type", ftype.llama_ftype());
    for (t, ty) in src.tensors().iter().zip(types) {
        w.add_tensor(&t.name, ty, &t.dims)?;
    }
    Ok(w)
}

/// Writes `src` quantized as `ftype` to `out`, one tensor at a time.
pub fn quantize_gguf(
    src: &GgufFile,
    ftype: FileType,
    out: &Path,
    progress: Progress,
) -> Result<()> {
    let w = plan_quantize(src, ftype)?;
    write_streaming(
        w,
        out,
        &|i, info, buf| {
            let from = &src.tensors()[i];
            let data = src.tensor_data(from);
            if from.ty == info.ty {
                buf.copy_from_slice(data);
                return Ok(());
            }
            // Float sources have one element per block, so elements map to bytes linearly.
            let width = from.ty.block_bytes();
            encode_chunks(info.ty, buf, &|chunk, xs| {
                let start = chunk * CHUNK_ELEMS * width;
                decode(from.ty, &data[start..start + xs.len() * width], xs)
            })
        },
        progress,
    )
}
