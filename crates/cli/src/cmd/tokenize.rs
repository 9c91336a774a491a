//! `ferrolm tokenize`: text to token ids, as a JSON array.

use anyhow::{Context, Result};
use clap::Args;
use ferrolm_gguf::GgufFile;
use ferrolm_tokenizer::Tokenizer;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// Model file (default: the default model, pulled on first use).
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Add BOS/EOS as the model's metadata asks.
    #[arg(long)]
    pub add_special: bool,
    /// Treat special-token text (`<|im_start|>`) as plain text.
    #[arg(long)]
    pub no_parse_special: bool,
    /// The text to tokenize.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub text: Option<String>,
    /// Read the text from a file (UTF-8).
    #[arg(long)]
    pub file: Option<PathBuf>,
}

pub fn run(args: TokenizeArgs) -> Result<()> {
    let text = match (args.text, &args.file) {
        (Some(t), _) => t,
        (None, Some(f)) => {
            let bytes = std::fs::read(f).with_context(|| format!("{}", f.display()))?;
            String::from_utf8(bytes)
                .map_err(|e| anyhow::anyhow!("{}: not UTF-8 text ({e})", f.display()))?
        }
        (None, None) => unreachable!("clap requires --text or --file"),
    };
    let path = super::pull::model_or_default(args.model)?;
    let file = GgufFile::open(&path)?;
    let tok = Tokenizer::from_gguf(&file)?;
    let ids = tok.encode(&text, args.add_special, !args.no_parse_special)?;
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
