//! `ferrolm logits`: the parity interface. Prints the logits of given token ids as JSON.

use super::common::ModelOpts;
use anyhow::{Context, Result};
use clap::Args;
use ferrolm_engine::{Logits, Session};
use ferrolm_gguf::GgufFile;
use serde_json::json;

#[derive(Args, Debug)]
#[command(
    after_help = "Output: {\"n_vocab\": V, \"positions\": [..], \"logits\": [[..], ..]}, \
or with --top K: {\"n_vocab\": V, \"positions\": [..], \"top\": [[[id, logit], ..], ..]}."
)]
pub struct LogitsArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    /// Token ids, separated by spaces or commas.
    #[arg(long, required = true)]
    pub tokens: String,
    /// Print every position, not just the last.
    #[arg(long)]
    pub all: bool,
    /// Feed one token per forward pass instead of one batched pass.
    #[arg(long)]
    pub step: bool,
    /// Print only the K largest logits per position.
    #[arg(long)]
    pub top: Option<usize>,
}

pub fn parse_ids(text: &str) -> Result<Vec<u32>> {
    text.split([' ', ',', '\n', '\t'])
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .with_context(|| format!("--tokens: `{s}` is not a token id"))
        })
        .collect()
}

pub fn run(args: LogitsArgs) -> Result<()> {
    let ids = parse_ids(&args.tokens)?;
    anyhow::ensure!(!ids.is_empty(), "--tokens: no token ids given");
    let path = args.model.prepare()?;
    let file = GgufFile::open(&path)?;
    let model = args.model.load(&file)?;
    let n_vocab = model.cfg.n_vocab;
    let n_ctx = args.model.n_ctx(model.cfg.n_ctx).max(ids.len());
    args.model.check_fits(&model, n_ctx, 1)?;
    let mut session = Session::with_kv_type(&model, n_ctx, args.model.kv_type());
    let which = if args.all { Logits::All } else { Logits::Last };
    let rows = if args.step {
        let mut rows = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let l = session.eval(&[id], Logits::Last)?;
            if args.all || i + 1 == ids.len() {
                rows.extend(l);
            }
        }
        rows
    } else {
        session.eval(&ids, which)?
    };
    let positions: Vec<usize> = if args.all {
        (0..ids.len()).collect()
    } else {
        vec![ids.len() - 1]
    };
    let out = match args.top {
        None => {
            let logits: Vec<&[f32]> = rows.chunks_exact(n_vocab).collect();
            json!({"n_vocab": n_vocab, "positions": positions, "logits": logits})
        }
        Some(k) => {
            let top: Vec<Vec<(u32, f32)>> =
                rows.chunks_exact(n_vocab).map(|r| top_k(r, k)).collect();
            json!({"n_vocab": n_vocab, "positions": positions, "top": top})
        }
    };
    println!("{out}");
    Ok(())
}

fn top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<(u32, f32)> = row
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    idx.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    idx.truncate(k);
    idx
}
