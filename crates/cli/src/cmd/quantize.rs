//! `ferrolm quantize`: an F32/F16/BF16 GGUF to a quantized one, tensor by tensor.

use super::tooling::{file_type_parser, with_threads, Bar};
use anyhow::{Context, Result};
use clap::Args;
use ferrolm_gguf::GgufFile;
use ferrolm_model::{plan_quantize, quantize_gguf, FileType};
use std::path::PathBuf;

/// Each tensor gets the type llama.cpp's quantizer would pick for the file type: for
/// example Q6_K for the output (and a tied token embedding), more bits for some layers'
/// attn_v and ffn_down, F32 for norms and expert routers. Metadata is copied, with
/// `general.file_type` updated.
#[derive(Args)]
pub struct QuantizeArgs {
    /// Source model: a GGUF whose tensors are F32, F16 or BF16.
    pub input: PathBuf,
    /// Where to write the quantized model.
    pub output: PathBuf,
    /// Target file type, as llama-quantize names it.
    #[arg(value_name = "TYPE", value_parser = file_type_parser())]
    pub ftype: FileType,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: QuantizeArgs) -> Result<()> {
    let src = GgufFile::open(&args.input)?;
    let plan = plan_quantize(&src, args.ftype)?;
    let total = plan.tensors().iter().map(|t| t.n_bytes).sum();
    let bar = Bar::new(total, &format!("quantizing to {}", args.ftype));
    with_threads(args.threads, || {
        quantize_gguf(&src, args.ftype, &args.output, &|n| bar.inc(n))
    })?
    .with_context(|| format!("writing {}", args.output.display()))?;
    bar.done(&args.output, src.tensors().len());
    Ok(())
}
