//! `ferrolm perplexity`: llama-perplexity's measure of how well a model predicts a text.
//!
//! The method is llama.cpp's (`tools/perplexity/perplexity.cpp`, function `perplexity`): the
//! whole text is tokenized once (BOS first when the model adds one) and cut into
//! non-overlapping windows of `-c` tokens. Each window is evaluated from an empty cache with
//! its first token replaced by BOS (when the model adds one), and only its second half is
//! scored, so that every scored token has at least `-c/2` tokens of context: the logits at
//! position `j` against token `j + 1`, for `j` from `c/2` to `c - 2`.

mod score;

use super::common::ModelOpts;
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use ferrolm_engine::{Logits, Session};
use ferrolm_gguf::GgufFile;
use ferrolm_tokenizer::{Tokenizer, VocabType};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use score::{nll, NllSums};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// llama-perplexity's window when `-c` is not given.
const DEFAULT_WINDOW: usize = 512;

#[derive(Args, Debug)]
#[command(
    mut_arg("ctx_size", |a| a.help("Window size in tokens (default: 512, as for llama-perplexity)")),
    after_help = "Prints the running estimate after each window, as llama-perplexity does ([1]x,[2]y,...), then \
`Final estimate: PPL = X +/- Y`."
)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    /// The text to score (UTF-8).
    #[arg(
        short = 'f',
        long = "file",
        conflicts_with = "ids",
        required_unless_present = "ids"
    )]
    pub file: Option<PathBuf>,
    /// Score these token ids instead of a text (spaces, commas or newlines between them; a
    /// JSON array too): for models without a vocabulary. They are used as given.
    #[arg(long)]
    pub ids: Option<PathBuf>,
    /// Windows to score (default: every whole window the text holds).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Tokens per forward pass (default: 512 on the CPU, 2048 on a GPU).
    #[arg(short = 'b', long = "batch-size")]
    pub batch: Option<usize>,
}

pub fn run(args: PerplexityArgs) -> Result<()> {
    let n_ctx = args.model.ctx_size.unwrap_or(DEFAULT_WINDOW);
    ensure!(
        n_ctx >= 4,
        "-c/--ctx-size is {n_ctx}: a window must hold at least 4 tokens"
    );
    ensure!(args.chunks != Some(0), "--chunks must be at least 1");
    ensure!(args.batch != Some(0), "-b/--batch-size must be at least 1");
    let path = args.model.prepare()?;
    let file = GgufFile::open(&path)?;
    let trained = ferrolm_model::Config::from_gguf(&file)?.n_ctx;
    ensure!(
        n_ctx <= trained,
        "-c/--ctx-size is {n_ctx}, past the model's context of {trained} tokens"
    );
    let tok = Tokenizer::from_gguf(&file)?;
    let tokens = match (&args.file, &args.ids) {
        (Some(f), _) => tokenize(&tok, f)?,
        (None, Some(f)) => read_ids(f)?,
        (None, None) => unreachable!("clap requires -f or --ids"),
    };
    // llama-perplexity's rule: at least two windows' worth.
    if tokens.len() < 2 * n_ctx {
        bail!(
            "{}: the text is {} tokens; perplexity with -c {n_ctx} needs at least {} (two windows)",
            input_flag(&args),
            tokens.len(),
            2 * n_ctx
        );
    }
    // Replaced into each window's first position, as llama-perplexity does.
    let bos = tok.bos().filter(|_| tok.add_bos());

    let model = args.model.load(&file)?;
    args.model.check_fits(&model, n_ctx, 1)?;
    let mut session = Session::with_kv_type(&model, n_ctx, args.model.kv_type());
    let batch = args.batch.unwrap_or_else(|| model.default_ubatch());
    session.set_ubatch(batch);

    let n_chunk_max = tokens.len() / n_ctx;
    let n_chunk = args.chunks.map_or(n_chunk_max, |k| k.min(n_chunk_max));
    let first = n_ctx / 2;
    eprintln!(
        "perplexity: {} tokens, {n_chunk} windows of {n_ctx}, scoring the last {} of each",
        tokens.len(),
        n_ctx - first - 1
    );

    let bar = progress_bar(n_chunk);
    // The running line goes out window by window, except on a terminal where the bar is
    // drawn: there it would be erased by the bar, so it comes at the end.
    let stream = bar.is_hidden() || !std::io::stdout().is_terminal();
    let mut line = String::new();
    let mut sums = NllSums::default();
    let n_vocab = model.cfg.n_vocab;
    for i in 0..n_chunk {
        let mut window = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
        if let Some(bos) = bos {
            window[0] = bos;
        }
        session.truncate(0);
        // In passes of `batch` tokens, so that at most `batch` rows of logits are held.
        for start in (0..n_ctx).step_by(batch) {
            let end = (start + batch).min(n_ctx);
            if end <= first {
                session.eval(&window[start..end], Logits::Last)?;
                continue;
            }
            let logits = session.eval(&window[start..end], Logits::All)?;
            let scored: Vec<f64> = logits
                .par_chunks_exact(n_vocab)
                .enumerate()
                .filter(|&(r, _)| (first..n_ctx - 1).contains(&(start + r)))
                .map(|(r, row)| nll(row, window[start + r + 1]))
                .collect();
            // Summed in token order, so the result does not depend on the thread count.
            scored.into_iter().for_each(|v| sums.add(v));
        }
        let item = format!("[{}]{:.4},", i + 1, sums.ppl());
        if stream {
            print!("{item}");
            std::io::stdout().flush()?;
        }
        line.push_str(&item);
        bar.set_message(format!("PPL {:.4}", sums.ppl()));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !stream {
        print!("{line}");
    }
    println!();
    match sums.error() {
        Some(err) => println!("Final estimate: PPL = {:.4} +/- {err:.5}", sums.ppl()),
        None => println!("Final estimate: PPL = {:.4}", sums.ppl()),
    }
    Ok(())
}

fn input_flag(args: &PerplexityArgs) -> &'static str {
    if args.file.is_some() {
        "-f/--file"
    } else {
        "--ids"
    }
}

fn read_text(path: &Path, flag: &str) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{flag}: {}", path.display()))?;
    ensure!(!bytes.is_empty(), "{flag}: {} is empty", path.display());
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{flag}: {} is not UTF-8 text ({e})", path.display()))
}

/// The whole text as llama-perplexity tokenizes it: special tokens added (BOS), special-token
/// text left as plain text.
fn tokenize(tok: &Tokenizer, path: &Path) -> Result<Vec<u32>> {
    // llama-perplexity refuses these too: an EOS after the text would be scored as text.
    ensure!(
        !tok.add_eos(),
        "this model appends EOS to every text (tokenizer.ggml.add_eos_token); perplexity cannot score it"
    );
    ensure!(
        tok.vocab_type() != VocabType::None,
        "-f/--file: this model has no vocabulary (tokenizer.ggml.model = {}), so it cannot read text; give token ids with --ids",
        tok.model()
    );
    let text = read_text(path, "-f/--file")?;
    tok.encode(&text, true, false)
        .with_context(|| format!("-f/--file: tokenizing {}", path.display()))
}

fn read_ids(path: &Path) -> Result<Vec<u32>> {
    let text = read_text(path, "--ids")?;
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .with_context(|| format!("--ids: `{s}` in {} is not a token id", path.display()))
        })
        .collect()
}

fn progress_bar(n_chunk: usize) -> ProgressBar {
    let bar = ProgressBar::new(n_chunk as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} windows, eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message("perplexity");
    bar
}
