//! `ferrolm synth`: a random-weight GGUF with a real model's exact shapes, or the model a
//! recipe determines (the golden models under `goldens/`; see `ferrolm_model::Recipe`).

use super::tooling::{file_type_parser, with_threads, Bar};
use anyhow::{Context, Result};
use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};
use ferrolm_model::{presets, synth_recipe, FileType, Recipe, Synth, VocabKind};
use std::path::PathBuf;

#[derive(Args)]
#[command(after_help = preset_help())]
pub struct SynthArgs {
    /// Model shape (see the list below).
    #[arg(long, value_parser = PossibleValuesParser::new(presets::NAMES),
          required_unless_present = "recipe", conflicts_with = "recipe")]
    pub preset: Option<String>,
    /// A recipe (JSON: metadata, tensors and how to draw them, a seed) instead of a preset:
    /// `--type f32` writes it as declared, other types are that file quantized as llama.cpp's
    /// quantizer would. `--seed` and `--vocab` do not apply.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["seed", "vocab"])]
    pub recipe: Option<PathBuf>,
    /// File type; tensors get llama.cpp's per-tensor choices for it (as llama-quantize).
    #[arg(long = "type", value_name = "TYPE", value_parser = file_type_parser())]
    pub ftype: FileType,
    /// Where to write the GGUF file.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Seed for the weights: the same seed gives the same file, on any number of threads.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Tokenizer metadata: `none` (token ids only, `no_vocab`) or a small synthetic
    /// byte-level BPE vocabulary padded to the model's vocab size.
    #[arg(long, value_enum)]
    pub vocab: Option<Vocab>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Each quantized tensor's blocks drawn from a pool of 1024 quantized once, not each
    /// quantized from its own values: the same shapes, types and spread, written about as fast
    /// as the disk takes them (for the largest presets; random weights either way).
    #[arg(long, conflicts_with = "recipe")]
    pub pooled: bool,
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
    let Some(preset) = &args.preset else {
        return run_recipe(&args);
    };
    let vocab = match args.vocab.unwrap_or(Vocab::None) {
        Vocab::None => VocabKind::None,
        Vocab::Bpe => VocabKind::Bpe,
    };
    let mut synth = Synth::new(preset, args.ftype, args.seed.unwrap_or(0), vocab)?;
    synth.pooled = args.pooled.then_some(ferrolm_model::POOL_BLOCKS);
    let (plan, specs) = synth.plan()?;
    let total = plan.tensors().iter().map(|t| t.n_bytes).sum();
    let bar = Bar::new(total, &format!("{preset} {}", args.ftype));
    with_threads(args.threads, || synth.write(&args.output, &|n| bar.inc(n)))?
        .with_context(|| format!("writing {}", args.output.display()))?;
    bar.done(&args.output, specs.len());
    Ok(())
}

fn run_recipe(args: &SynthArgs) -> Result<()> {
    let path = args
        .recipe
        .as_ref()
        .expect("clap requires --preset or --recipe");
    let recipe = Recipe::open(path)?;
    let total = recipe.plan()?.tensors().iter().map(|t| t.n_bytes).sum();
    let bar = Bar::new(total, &format!("{} {}", path.display(), args.ftype));
    with_threads(args.threads, || {
        synth_recipe(&recipe, args.ftype, &args.output, &|n| bar.inc(n))
    })?
    .with_context(|| format!("writing {}", args.output.display()))?;
    bar.done(&args.output, recipe.tensors.len());
    Ok(())
}
