//! `ferrolm run`: generate text from a prompt, streamed to stdout.

use super::common::ModelOpts;
use anyhow::{bail, Context, Result};
use clap::Args;
use ferrolm_engine::constraint::{ConstraintVocab, GrammarSpec};
use ferrolm_engine::{generate, GenerateParams, Sampler, SamplerConfig};
use ferrolm_gguf::GgufFile;
use ferrolm_tokenizer::{ChatTemplate, Message, Tokenizer};
use std::io::Write;
use std::path::PathBuf;

/// Sampling options shared by `run` and `chat`.
#[derive(Args, Debug, Clone)]
pub struct SamplingOpts {
    /// Temperature; 0 means greedy.
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long = "top-k", default_value_t = 40, allow_negative_numbers = true)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches P (1: off).
    #[arg(long = "top-p", default_value_t = 0.95, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Drop tokens less likely than P times the best one (0: off).
    #[arg(long = "min-p", default_value_t = 0.05, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Penalise recently seen tokens (1: off).
    #[arg(
        long = "repeat-penalty",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub repeat_penalty: f32,
    /// Seed for sampling.
    #[arg(long, default_value_t = 0xF0F0_1234)]
    pub seed: u64,
    /// Tokens to generate at most.
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    pub n_predict: usize,
    /// Stop when the output contains this text (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Constrain the output to JSON valid against the schema in FILE.
    #[arg(
        short = 'j',
        long = "json-schema",
        value_name = "FILE",
        conflicts_with = "grammar"
    )]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to the grammar in FILE: GBNF (llama.cpp's), or llguidance Lark
    /// when the file starts with `%llguidance` or ends in `.lark`.
    #[arg(long = "grammar", value_name = "FILE")]
    pub grammar: Option<PathBuf>,
}

impl SamplingOpts {
    /// The same ranges the server accepts for its fields; one line naming the flag if not.
    pub fn validate(&self) -> Result<()> {
        let range = |flag: &str, v: f32, lo: f32, hi: f32| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "{flag} is {v}; it must be between {lo} and {hi}"
                ))
            }
        };
        range("--temp", self.temperature, 0.0, 2.0)?;
        range("--top-p", self.top_p, 0.0, 1.0)?;
        range("--min-p", self.min_p, 0.0, 1.0)?;
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            bail!(
                "--repeat-penalty is {}; it must be a positive number (1: off)",
                self.repeat_penalty
            );
        }
        if self.stop.iter().any(String::is_empty) {
            bail!("--stop \"\" would stop at once; give a non-empty stop string");
        }
        Ok(())
    }

    pub fn sampler(&self) -> Sampler {
        Sampler::new(SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
            seed: self.seed,
        })
    }

    /// Generation parameters; with `--json-schema` or `--grammar`, the constraint compiled
    /// against the model's vocabulary (`n_vocab`: the logits' width).
    pub fn params(&self, tok: &Tokenizer, n_vocab: usize) -> Result<GenerateParams> {
        let grammar = match self.grammar_spec()? {
            None => None,
            Some((flag, spec)) => {
                let vocab = ConstraintVocab::new(tok, n_vocab)?;
                Some(
                    vocab
                        .compile(&spec)
                        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?,
                )
            }
        };
        Ok(GenerateParams {
            n_predict: self.n_predict,
            stop: self.stop.clone(),
            cancel: None,
            grammar,
        })
    }

    /// The constraint the flags ask for, with the flag's name for messages.
    fn grammar_spec(&self) -> Result<Option<(&'static str, GrammarSpec)>> {
        let read = |flag: &str, f: &PathBuf| {
            std::fs::read_to_string(f).with_context(|| format!("{flag} {}", f.display()))
        };
        if let Some(f) = &self.json_schema {
            let text = read("--json-schema", f)?;
            let schema = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("--json-schema {}: not valid JSON ({e})", f.display())
            })?;
            return Ok(Some((
                "--json-schema",
                GrammarSpec::JsonSchema {
                    schema,
                    strict: true,
                },
            )));
        }
        if let Some(f) = &self.grammar {
            let text = read("--grammar", f)?;
            let spec = if f.extension().is_some_and(|e| e == "lark") {
                GrammarSpec::Lark(text)
            } else {
                GrammarSpec::from_grammar_text(&text)
            };
            return Ok(Some(("--grammar", spec)));
        }
        Ok(None)
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    #[command(flatten)]
    pub sampling: SamplingOpts,
    /// The prompt. Special tokens written in it (`<|im_start|>`) are parsed.
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file (UTF-8).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long)]
    pub chat: bool,
}

pub fn run(args: RunArgs) -> Result<()> {
    args.sampling.validate()?;
    let prompt = match (&args.prompt, &args.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            let bytes = std::fs::read(f).with_context(|| format!("{}", f.display()))?;
            String::from_utf8(bytes)
                .map_err(|e| anyhow::anyhow!("{}: not UTF-8 text ({e})", f.display()))?
        }
        (None, None) => bail!("give a prompt with -p TEXT or -f FILE"),
    };
    let path = args.model.prepare()?;
    let file = GgufFile::open(&path)?;
    let model = args.model.load(&file)?;
    let tok = Tokenizer::from_gguf(&file)?;
    let text = if args.chat {
        ChatTemplate::from_gguf(&file, &tok)?.render(&[Message::new("user", prompt)], true)?
    } else {
        prompt
    };
    let ids = tok.encode(&text, true, true)?;
    if ids.is_empty() {
        bail!("the prompt is empty: give some text with -p TEXT or -f FILE");
    }
    let params = args.sampling.params(&tok, model.cfg.n_vocab)?;
    let mut session = args.model.session(&model)?;
    let mut sampler = args.sampling.sampler();
    let mut stdout = std::io::stdout().lock();
    let stats = generate(&mut session, &mut sampler, &tok, &ids, &params, |piece| {
        let _ = stdout.write_all(piece.as_bytes());
        let _ = stdout.flush();
    })?;
    writeln!(stdout)?;
    let constraint = if params.grammar.is_some() {
        // Per mask: its cost, and the part the forward pass did not hide.
        let per = |secs: f64| secs * 1e3 / (stats.n_gen + 1) as f64;
        format!(
            " | masks: {:.3} ms each, {:.3} ms waited",
            per(stats.mask_secs),
            per(stats.mask_wait_secs)
        )
    } else {
        String::new()
    };
    eprintln!(
        "prompt: {} tokens, {:.2} t/s | generation: {} tokens, {:.2} t/s{constraint}",
        stats.n_prompt,
        stats.prompt_tps(),
        stats.n_gen,
        stats.gen_tps()
    );
    Ok(())
}
