//! The HTTP side: routes, auth, body limits, and turning a validated request into a queued
//! job whose events become one JSON response or an SSE stream ([`crate::respond`]).

use crate::api::{self, Endpoint, GenRequest, Prompt};
use crate::error::ApiError;
use crate::guard::{self, HostPolicy};
use crate::metrics::Metrics;
use crate::respond::{self, Reply};
use crate::scheduler::{Handle, Job, SubmitError};
use crate::structured::LazyVocab;
use crate::tools::{constrain, ToolRequest};
use crate::{Engine, ServeOptions};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ferrolm_tokenizer::chat::ToolPrompt;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    engine: Engine,
    model_id: String,
    api_key: Option<String>,
    hosts: HostPolicy,
    special_in_content: bool,
    n_ctx: usize,
    max_body: usize,
    body_timeout: std::time::Duration,
    handle: Handle,
    metrics: Arc<Metrics>,
    started: u64,
    vocab: LazyVocab,
}

impl AppState {
    pub fn new(engine: Engine, opts: &ServeOptions, handle: Handle, metrics: Arc<Metrics>) -> Self {
        Self(Arc::new(Inner {
            engine,
            model_id: opts.model_id.clone(),
            api_key: opts.api_key.clone(),
            hosts: HostPolicy::new(opts.addr, &opts.allow_hosts),
            special_in_content: opts.special_in_content,
            n_ctx: opts.n_ctx,
            max_body: opts.max_body,
            body_timeout: opts.body_timeout,
            handle,
            metrics,
            started: unix_now(),
            vocab: LazyVocab::default(),
        }))
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn router(state: AppState) -> Router {
    let max_body = state.0.max_body;
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .fallback(|uri: Uri| async move { ApiError::not_found(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// With `--api-key`, everything but `/health` needs `Authorization: Bearer KEY`. Without
/// one, requests must come from this machine's own clients, not a web page ([`guard`]).
async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if st.0.api_key.is_none() {
        let text = |name| {
            req.headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let host = text(header::HOST)
            .or_else(|| req.uri().authority().map(|a| a.to_string()))
            .unwrap_or_default();
        if !st.0.hosts.allows(&host) {
            return ApiError::forbidden_host(&host).into_response();
        }
        if req.method() == axum::http::Method::POST {
            let ty = text(header::CONTENT_TYPE).unwrap_or_default();
            if !guard::is_json(&ty) {
                return ApiError::not_json(&ty).into_response();
            }
        }
    }
    if let Some(key) = &st.0.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if req.uri().path() != "/health" && given != Some(key.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// Reads a request's body within `--body-timeout` (408 beyond) and `--max-body` (413), so a
/// client that sends half a body cannot hold its connection and buffers open.
async fn read_body(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let limit = st.0.max_body;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return ApiError::body_rejected(axum::http::StatusCode::PAYLOAD_TOO_LARGE, String::new())
            .into_response();
    }
    let bytes = match tokio::time::timeout(st.0.body_timeout, axum::body::to_bytes(body, limit))
        .await
    {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            let too_large = e
                .into_inner()
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            return if too_large {
                ApiError::body_rejected(axum::http::StatusCode::PAYLOAD_TOO_LARGE, String::new())
            } else {
                ApiError::bad_json("reading the request body failed")
            }
            .into_response();
        }
        Err(_) => return ApiError::body_timeout(st.0.body_timeout).into_response(),
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// Counts every answered request by route and status code.
async fn count(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let path = match req.uri().path() {
        p
        @ ("/health" | "/metrics" | "/v1/models" | "/v1/chat/completions" | "/v1/completions") => {
            p.to_owned()
        }
        _ => "other".to_owned(),
    };
    let resp = next.run(req).await;
    st.0.metrics.count_request(&path, resp.status().as_u16());
    resp
}

async fn health(State(st): State<AppState>) -> Json<serde_json::Value> {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &st.0.metrics;
    Json(serde_json::json!({
        "status": "ok",
        "slots_total": m.slots_total,
        "slots_active": m.slots_active.load(Relaxed),
        "queue_depth": m.queue_depth.load(Relaxed),
    }))
}

async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.0.metrics.render(),
    )
        .into_response()
}

async fn models(State(st): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "object": "list",
        "data": [{
            "id": st.0.model_id,
            "object": "model",
            "created": st.0.started,
            "owned_by": "ferrolm",
        }],
    }))
}

async fn chat(State(st): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(st, Endpoint::Chat, body).await
}

async fn completions(State(st): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(st, Endpoint::Completions, body).await
}

async fn generate(
    st: AppState,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let arrived = Instant::now();
    match start(&st, endpoint, body, arrived) {
        Ok(reply) => {
            if reply.stream {
                respond::stream(reply).into_response()
            } else {
                respond::collect(reply).await
            }
        }
        Err(e) => e.into_response(),
    }
}

/// Validates, tokenizes and queues a request.
fn start(
    st: &AppState,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
    arrived: Instant,
) -> Result<Reply, ApiError> {
    let body = body.map_err(|r| ApiError::body_rejected(r.status(), r.body_text()))?;
    let req = api::parse(endpoint, &body)?;
    let s = &st.0;
    if req.model != s.model_id {
        return Err(ApiError::unknown_model(&req.model, &s.model_id));
    }
    let prompt = tokenize(s.engine, &req, s.special_in_content)?;
    // At least one position must be left to generate into.
    if prompt.len() >= s.n_ctx {
        return Err(ApiError::context_exceeded(prompt.len(), s.n_ctx));
    }
    let constraint = constrain::choose(
        s.engine.template.tool_format(),
        req.tools.as_ref(),
        req.params.constraint.as_ref(),
    )?;
    let grammar = match &constraint {
        None => None,
        // Compiling takes milliseconds (more the first time): let tokio move other tasks off
        // this worker meanwhile.
        Some(c) => Some(tokio::task::block_in_place(|| {
            s.vocab.compile(c, s.engine.tok, s.engine.model.cfg.n_vocab)
        })?),
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let job = Job {
        prompt,
        grammar,
        params: req.params.clone(),
        events: tx,
        enqueued: arrived,
    };
    match s.handle.submit(job) {
        Ok(()) => {}
        Err(SubmitError::QueueFull) => return Err(ApiError::queue_full()),
        Err(SubmitError::Closed) => return Err(ApiError::internal("the engine has stopped")),
    }
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
    };
    let tools = req
        .tools
        .as_ref()
        .filter(|t| t.active())
        .map(|t| (s.engine.template.tool_format(), t.parallel));
    Ok(Reply {
        tools,
        endpoint,
        id: format!("{prefix}-{:016x}", rand::random::<u64>()),
        created: unix_now(),
        model: s.model_id.clone(),
        stream: req.stream,
        include_usage: req.include_usage,
        logprobs: req.params.logprobs.is_some(),
        events: rx,
        arrived,
        metrics: s.metrics.clone(),
    })
}

fn tokenize(
    engine: Engine,
    req: &GenRequest,
    special_in_content: bool,
) -> Result<Vec<u32>, ApiError> {
    let field = match req.prompt {
        Prompt::Chat(_) => "messages",
        _ => "prompt",
    };
    let text = match &req.prompt {
        Prompt::Chat(messages) => {
            let tools = req.tools.as_ref().filter(|t| t.active()).map(prompt_tools);
            let ids = engine
                .template
                .encode_with_tools(
                    engine.tok,
                    messages,
                    tools.as_ref(),
                    true,
                    special_in_content,
                )
                .map_err(|e| {
                    ApiError::invalid("messages", format!("the model's chat template: {e}"))
                })?;
            if ids.is_empty() {
                return Err(ApiError::invalid(field, "the prompt is empty"));
            }
            return Ok(ids);
        }
        Prompt::Text(t) => t.clone(),
        Prompt::Tokens(ids) => {
            let n_vocab = engine.tok.n_vocab();
            if let Some(id) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("token id {id} is out of range: the vocabulary has {n_vocab}"),
                ));
            }
            return Ok(ids.clone());
        }
    };
    let ids = engine
        .tok
        .encode(&text, true, true)
        .map_err(|e| ApiError::invalid(field, format!("tokenizing: {e}")))?;
    if ids.is_empty() {
        return Err(ApiError::invalid(field, "the prompt is empty"));
    }
    Ok(ids)
}

/// The tools as the chat template is given them.
fn prompt_tools(t: &ToolRequest) -> ToolPrompt {
    ToolPrompt {
        tools: t.raw.clone(),
        parallel: t.parallel,
    }
}
