//! `ferrolm synth`: a random-weight GGUF with a real model's exact shapes.

use super::tooling::{file_type_parser, with_threads, Bar};
use anyhow::{Context, Result};
use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};
use ferrolm_model::{presets, FileType, Synth, VocabKind};
use std::path::PathBuf;

#[derive(Args)]
#[command(after_help = preset_help())]
pub struct SynthArgs {
    /// Model shape (see the list below).
    #[arg(long, value_parser = PossibleValuesParser::new(presets::NAMES))]
    pub preset: String,
    /// File type; tensors get llama.cpp's per-tensor choices for it (as llama-quantize).
    #[arg(long = "type", value_name = "TYPE", value_parser = file_type_parser())]
    pub ftype: FileType,
    /// Where to write the GGUF file.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Seed for the weights: the same seed gives the same file, on any number of threads.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Tokenizer metadata: `none` (token ids only, `no_vocab`) or a small synthetic
    /// byte-level BPE vocabulary padded to the model's vocab size.
    #[arg(long, value_enum, default_value_t = Vocab::None)]
    pub vocab: Vocab,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Vocab {
    None,
    Bpe,
}

fn preset_help() -> String {
    let mut s = String::from("Presets:\n");
    for name in presets::NAMES {
        let p = presets::preset(name).expect("listed presets exist");
        s.push_str(&format!("  {name:<15} {}\n", p.about));
    }
    s
}

pub fn run(args: SynthArgs) -> Result<()> {
    let vocab = match args.vocab {
        Vocab::None => VocabKind::None,
        Vocab::Bpe => VocabKind::Bpe,
    };
    let synth = Synth::new(&args.preset, args.ftype, args.seed, vocab)?;
    let (plan, specs) = synth.plan()?;
    let total = plan.tensors().iter().map(|t| t.n_bytes).sum();
    let bar = Bar::new(total, &format!("{} {}", args.preset, args.ftype));
    with_threads(args.threads, || synth.write(&args.output, &|n| bar.inc(n)))?
        .with_context(|| format!("writing {}", args.output.display()))?;
    bar.done(&args.output, specs.len());
    Ok(())
}
