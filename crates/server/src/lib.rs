//! `ferrolm serve`: an OpenAI-compatible HTTP API over one loaded model.
//!
//! Two halves that talk through channels:
//! - [`scheduler`]: a dedicated thread that owns the KV slots and runs continuous batching
//!   (every active sequence decodes in one forward pass per step; new requests join between
//!   steps; long prompts prefill in chunks).
//! - [`http`]: axum handlers on tokio that validate requests ([`api`]), queue them, and stream
//!   results back (SSE), with OpenAI-style errors ([`error`]) and Prometheus [`metrics`].

pub mod api;
pub mod error;
pub mod guard;
pub mod http;
mod kv_budget;
pub mod metrics;
pub mod prefix;
mod respond;
pub mod scheduler;
mod sequence;
pub mod structured;
pub mod tools;

use ferrolm_engine::{KvType, Model};
use ferrolm_tokenizer::{ChatTemplate, Tokenizer};
use std::net::SocketAddr;
use std::time::Duration;

/// What the server runs on. `'static` because the engine thread and the handlers live as
/// long as the process; the CLI leaks the loaded model once to get there.
#[derive(Clone, Copy)]
pub struct Engine {
    pub model: &'static Model<'static>,
    pub tok: &'static Tokenizer,
    pub template: &'static ChatTemplate,
}

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    /// The model's name in `/v1/models` and the one requests must ask for.
    pub model_id: String,
    pub api_key: Option<String>,
    /// Sequences decoded together, each in its own KV slot.
    pub parallel: usize,
    /// Context per slot, in tokens.
    pub n_ctx: usize,
    pub kv_type: KvType,
    /// The GPU's KV pool in blocks, instead of what `parallel` contexts or free memory give
    /// (`--kv-blocks`).
    pub kv_blocks: Option<usize>,
    /// Tokens one step's forward pass takes, across all sequences (`--batch-size`): a token
    /// per decoding sequence, prompt chunks in the rest.
    pub batch: usize,
    /// Start new sequences from cached prompt prefixes ([`prefix`]).
    pub prefix_cache: bool,
    /// Greedy answers bit-identical whatever shares the batch (on a GPU: a pass per sequence).
    pub deterministic: bool,
    /// Stream a step's greedy picks' text beside the next step's forward pass, where it is
    /// otherwise streamed between the passes (off: `--no-stream-overlap`, for bisecting).
    pub stream_overlap: bool,
    /// Requests that may wait for a slot; beyond this they get 429.
    pub queue: usize,
    /// Largest request body, in bytes (413 beyond).
    pub max_body: usize,
    /// Parse special-token text inside chat message contents as control tokens (off: a user
    /// cannot forge turns).
    pub special_in_content: bool,
    /// More `Host` names to accept without an API key ([`guard`]); `*` accepts any.
    pub allow_hosts: Vec<String>,
    /// Longest wait for a request line and its headers, from the connection's start or the
    /// previous response (so also the idle time a keep-alive connection may stay open).
    pub header_timeout: Duration,
    /// Longest time to receive a request's body (408 beyond).
    pub body_timeout: Duration,
}

/// Binds, prints the address on stderr, and serves until Ctrl-C.
pub fn serve(engine: Engine, opts: ServeOptions) -> std::io::Result<()> {
    let metrics = std::sync::Arc::new(metrics::Metrics::new(opts.parallel));
    let (handle, sched) = scheduler::Scheduler::new(engine, &opts, metrics.clone())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let engine_thread = std::thread::Builder::new()
        .name("ferrolm-engine".into())
        .spawn(move || sched.run())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(opts.addr).await?;
        eprintln!(
            "ferrolm serve: listening on http://{} ({} slots of {} tokens)",
            listener.local_addr()?,
            opts.parallel,
            opts.n_ctx
        );
        let app = http::router(http::AppState::new(engine, &opts, handle, metrics));
        accept_loop(listener, app, opts.header_timeout).await
    });
    // The router (and with it the last queue sender) is gone: the engine thread finishes.
    drop(rt);
    let _ = engine_thread.join();
    result
}

/// Serves connections until Ctrl-C, then lets the requests in flight finish. Each connection
/// is HTTP/1.1 with hyper's header-read timer: a client that sends half a request line or half
/// its headers, or leaves a keep-alive connection idle, is dropped after `header_timeout`
/// (body reads are timed in [`http`]).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    header_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let stream = tokio::select! {
            _ = &mut ctrl_c => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors, a connection reset before accept: wait, keep serving.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
