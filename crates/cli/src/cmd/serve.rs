//! `ferrolm serve`: the OpenAI-compatible HTTP server (crates/server), on one loaded model.

use super::common::ModelOpts;
use anyhow::{bail, Context, Result};
use clap::Args;
use ferrolm_engine::Model;
use ferrolm_gguf::GgufFile;
use ferrolm_server::{Engine, ServeOptions};
use ferrolm_tokenizer::{ChatTemplate, Tokenizer};
use std::net::{IpAddr, SocketAddr};

#[derive(Args, Debug)]
#[command(after_help = "\
Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, \
GET /metrics (Prometheus). Requests name the model by the id /v1/models lists (--alias, \
else the file name without .gguf).

Each of the --parallel slots holds one sequence of up to -c tokens; active sequences decode \
together, one batched forward pass per step. When all slots are busy, up to --queue requests \
wait; more get 429.")]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    /// Address to bind: loopback by default; 0.0.0.0 exposes the server to the network.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long = "api-key")]
    pub api_key: Option<String>,
    /// Sequences decoded together, each in its own KV slot of -c tokens.
    #[arg(long, visible_alias = "np", default_value_t = 4)]
    pub parallel: usize,
    /// Most prompt tokens prefilled per step, across requests: the longest a new prompt
    /// delays the sequences already generating.
    #[arg(long, default_value_t = 256)]
    pub ubatch: usize,
    /// Requests that may wait for a slot before the server answers 429.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long = "max-body", default_value_t = 1 << 20)]
    pub max_body: usize,
    /// The model's name in /v1/models (default: the file name without .gguf).
    #[arg(long)]
    pub alias: Option<String>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    if args.parallel == 0 || args.ubatch == 0 {
        bail!("--parallel and --ubatch must be at least 1");
    }
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
    // Every slot's cache is made at start: check them all against memory first.
    args.model.check_fits(model, n_ctx, args.parallel)?;
    let model_id = args.alias.clone().unwrap_or_else(|| {
        path.file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned())
    });
    let opts = ServeOptions {
        addr: SocketAddr::new(args.host, args.port),
        model_id,
        api_key: args.api_key.clone(),
        parallel: args.parallel,
        n_ctx,
        kv_type: args.model.kv_type(),
        ubatch: args.ubatch,
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
