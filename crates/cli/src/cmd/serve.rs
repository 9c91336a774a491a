//! `ferrolm serve`: the OpenAI-compatible HTTP server (crates/server), on one loaded model.

use super::common::ModelOpts;
use anyhow::{bail, Context, Result};
use clap::Args;
use ferrolm_engine::Model;
use ferrolm_gguf::GgufFile;
use ferrolm_server::{Engine, ServeOptions};
use ferrolm_tokenizer::{ChatTemplate, Tokenizer};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, \
GET /metrics (Prometheus). Requests name the model by the id /v1/models lists (--alias, \
else the file name without .gguf).

Each of the --parallel slots holds one sequence of up to -c tokens; active sequences decode \
together, one batched forward pass per step. When all slots are busy, up to --queue requests \
wait; more get 429. On a GPU the KV cache is paged: the slots share one pool of blocks, sized \
to --parallel x -c tokens or to what free GPU memory holds if that is less, and a request \
also waits until the blocks its prompt and max_tokens can reach (at most -c) are free.")]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    /// Address to bind: loopback by default; 0.0.0.0 exposes the server to the network.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health. Visible to other
    /// users in `ps`: prefer --api-key-file or the FERROLM_API_KEY environment variable.
    #[arg(long = "api-key", conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from this file (its first line).
    #[arg(long = "api-key-file")]
    pub api_key_file: Option<PathBuf>,
    /// Without an API key, also accept requests whose Host header is NAME (repeatable; `*`:
    /// any). By default only the bound address is (loopback names when bound to loopback).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Parse special-token text (`<|im_start|>`) inside chat message contents as control
    /// tokens. Off: contents are plain text, so a user cannot forge system or assistant turns.
    #[arg(long = "special-in-content")]
    pub special_in_content: bool,
    /// Sequences decoded together, each in its own KV slot of -c tokens.
    #[arg(long, visible_alias = "np", default_value_t = 4)]
    pub parallel: usize,
    /// Tokens per step, across requests: one for each generating sequence, prompt chunks in
    /// the rest (at least an eighth of it). A long prompt is prefilled over several steps, the
    /// generating sequences getting a token at each.
    #[arg(
        short = 'b',
        long = "batch-size",
        visible_alias = "ubatch",
        default_value_t = 256
    )]
    pub batch_size: usize,
    /// Never start a request from another's cached prompt prefix (by default the longest
    /// cached prefix of at least a few dozen tokens is reused; `usage` reports it as
    /// `prompt_tokens_details.cached_tokens`).
    #[arg(long = "no-prefix-cache")]
    pub no_prefix_cache: bool,
    /// Greedy answers bit-identical whatever shares the batch. The CPU always is; on a GPU
    /// each sequence then runs in a forward pass of its own, without prefix reuse (slower
    /// under load).
    #[arg(long)]
    pub deterministic: bool,
    /// Stream each step's greedy tokens between the forward passes, not beside the next one
    /// (the default, which keeps their text off the GPU's path; the same text either way).
    #[arg(long = "no-stream-overlap")]
    pub no_stream_overlap: bool,
    /// On a GPU: the KV pool's size in blocks of 64 tokens, instead of --parallel × -c tokens
    /// (or what free memory holds). At least one -c; requests wait for their blocks.
    #[arg(long = "kv-blocks", value_name = "N")]
    pub kv_blocks: Option<usize>,
    /// Requests that may wait for a slot before the server answers 429.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long = "max-body", default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Seconds a client has to send a request line and headers; also how long an idle
    /// keep-alive connection stays open.
    #[arg(long = "header-timeout", default_value_t = 30.0, value_name = "SECS")]
    pub header_timeout: f64,
    /// Seconds a client has to send a request's body (408 beyond).
    #[arg(long = "body-timeout", default_value_t = 60.0, value_name = "SECS")]
    pub body_timeout: f64,
    /// The model's name in /v1/models (default: the file name without .gguf).
    #[arg(long)]
    pub alias: Option<String>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.parallel == 0 || args.batch_size == 0 {
        bail!("--parallel and --batch-size must be at least 1");
    }
    let api_key = api_key(&args)?;
    let secs = |flag: &str, v: f64| {
        if v.is_finite() && v > 0.0 && v <= 86_400.0 {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(anyhow::anyhow!(
                "{flag} is {v}; give seconds between 0 and 86400"
            ))
        }
    };
    let header_timeout = secs("--header-timeout", args.header_timeout)?;
    let body_timeout = secs("--body-timeout", args.body_timeout)?;
    let path = args.model.prepare()?;
    // The server runs until the process ends; leaking the model once gives the engine
    // thread and the handlers the 'static borrows they need.
    let file: &'static GgufFile = Box::leak(Box::new(GgufFile::open(&path)?));
    let mut model = args.model.load(file)?;
    // A request's answer must not depend on which others share its batch.
    model.set_batch_invariant(true);
    let model: &'static Model<'static> = Box::leak(Box::new(model));
    let tok: &'static Tokenizer = Box::leak(Box::new(Tokenizer::from_gguf(file)?));
    let template: &'static ChatTemplate = Box::leak(Box::new(ChatTemplate::from_gguf(file, tok)?));
    let n_ctx = args.model.n_ctx(model.cfg.n_ctx);
    if args.kv_blocks.is_some() && !model.kv_is_paged() {
        bail!(
            "--kv-blocks sizes a GPU's paged KV cache; this model's cache is not paged (it runs \
             on the CPU, or partly with -ngl, or FERROLM_KV_POOL=0): leave the flag out"
        );
    }
    // Paged on a GPU, the slots share a pool of what fits (at least one context); else every
    // slot's cache is made whole at start: check them all against memory first.
    let whole = if model.kv_is_paged() {
        1
    } else {
        args.parallel
    };
    args.model.check_fits(model, n_ctx, whole)?;
    let model_id = args.alias.clone().unwrap_or_else(|| {
        path.file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned())
    });
    let opts = ServeOptions {
        addr: SocketAddr::new(args.host, args.port),
        model_id,
        api_key,
        special_in_content: args.special_in_content,
        allow_hosts: args.allow_host.clone(),
        header_timeout,
        body_timeout,
        parallel: args.parallel,
        n_ctx,
        kv_type: args.model.kv_type(),
        kv_blocks: args.kv_blocks,
        batch: args.batch_size,
        prefix_cache: !args.no_prefix_cache,
        deterministic: args.deterministic,
        stream_overlap: !args.no_stream_overlap,
        queue: args.queue,
        max_body: args.max_body,
    };
    let engine = Engine {
        model,
        tok,
        template,
    };
    ferrolm_server::serve(engine, opts)
        .with_context(|| format!("serving on {}:{}", args.host, args.port))
}

/// The key from --api-key, --api-key-file, or `FERROLM_API_KEY`, in that order.
fn api_key(args: &ServeArgs) -> Result<Option<String>> {
    let key = if let Some(k) = &args.api_key {
        Some(k.clone())
    } else if let Some(f) = &args.api_key_file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("--api-key-file {}", f.display()))?;
        Some(text.lines().next().unwrap_or("").trim().to_owned())
    } else {
        std::env::var("FERROLM_API_KEY").ok()
    };
    if key.as_deref().is_some_and(str::is_empty) {
        bail!("the API key is empty; give a non-empty key (--api-key, --api-key-file or FERROLM_API_KEY)");
    }
    Ok(key)
}
