//! Quantizing a float GGUF model with llama.cpp's per-tensor type choices, into the file
//! llama.cpp's quantizer writes byte for byte: its tensor order, its key order, its data.

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::policy::{choose_types, FileType, PolicyModel, TensorRef};
use crate::stream::{decode, encode_chunks, write_streaming, Progress, CHUNK_ELEMS};
use crate::QUANTIZATION_VERSION;
use ferrolm_gguf::{GgmlType, GgufFile, GgufWriter, TensorInfo};
use std::cmp::Ordering;
use std::path::Path;

const QUANT_VERSION_KEY: &str = "general.quantization_version";
const FILE_TYPE_KEY: &str = "general.file_type";

/// The output file's metadata and tensor declarations: the source's metadata, then
/// `general.quantization_version` and `general.file_type` (llama.cpp removes and appends
/// them, so they come last, in that order), and the source's tensors with their new types in
/// llama.cpp's order ([`llama_tensor_order`]). A tensor may be quantized in the source only
/// where its new type is the one it has (copied, as llama.cpp does with a checkpoint's MXFP4
/// experts).
pub fn plan_quantize(src: &GgufFile, ftype: FileType) -> Result<GgufWriter> {
    let is_float = |t: GgmlType| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
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
    if let Some((t, ty)) = src
        .tensors()
        .iter()
        .zip(&types)
        .find(|(t, ty)| !is_float(t.ty) && t.ty != **ty)
    {
        return Err(ModelError::Invalid(format!(
            "{} is already quantized (tensor `{}` is {}, {ftype} wants {ty}); quantize from an \
             F32, F16 or BF16 file",
            src.path().display(),
            t.name,
            t.ty
        )));
    }

    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != QUANT_VERSION_KEY && k != FILE_TYPE_KEY {
            w.set(k, v.clone());
        }
    }
    w.set(QUANT_VERSION_KEY, QUANTIZATION_VERSION);
    w.set(FILE_TYPE_KEY, ftype.llama_ftype());
    let mut order: Vec<(&TensorInfo, GgmlType)> = src.tensors().iter().zip(types).collect();
    order.sort_by(|a, b| llama_tensor_order(&a.0.name, &b.0.name));
    for (t, ty) in order {
        w.add_tensor(&t.name, ty, &t.dims)?;
    }
    Ok(w)
}

/// llama.cpp's `weight_name_comparer`: by block number (`blk.N.`; other tensors count as -1,
/// so they come first), then by name, bytewise.
pub fn llama_tensor_order(a: &str, b: &str) -> Ordering {
    let block = |name: &str| -> i64 {
        name.strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or(-1)
    };
    block(a).cmp(&block(b)).then_with(|| a.cmp(b))
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
        &|_, info, buf| {
            let from = src.require_tensor(&info.name)?;
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
