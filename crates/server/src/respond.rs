//! From a request's engine events to OpenAI response objects: one JSON body, or SSE chunks
//! ending in `data: [DONE]`.

use crate::api::Endpoint;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::scheduler::{Event, FinishReason, TokenLogprob};
use crate::tools::parse::{self, call_id, Delta, ToolStream};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrolm_tokenizer::chat::ToolFormat;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio_stream::wrappers::ReceiverStream;

/// A queued request, as the response side needs it.
pub struct Reply {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: bool,
    /// The reply is read for tool calls in this format (`parallel_tool_calls` with it).
    pub tools: Option<(ToolFormat, bool)>,
    pub events: UnboundedReceiver<Event>,
    pub arrived: Instant,
    pub metrics: Arc<Metrics>,
}

impl Reply {
    /// The envelope every response and chunk shares.
    fn object(&self, chunk: bool, choices: Value) -> Value {
        let object = match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completions, _) => "text_completion",
        };
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// One choice: chat's `message` (or `delta` when streaming) or the completion's `text`.
    fn choice(
        &self,
        chunk: bool,
        text: &str,
        lp: Option<Value>,
        finish: Option<FinishReason>,
    ) -> Value {
        let finish = finish.map(FinishReason::as_str);
        match self.endpoint {
            Endpoint::Chat => {
                let key = if chunk { "delta" } else { "message" };
                let mut msg = json!({ "content": text });
                if !chunk {
                    msg["role"] = json!("assistant");
                }
                json!({"index": 0, key: msg, "logprobs": lp, "finish_reason": finish})
            }
            Endpoint::Completions => {
                json!({"index": 0, "text": text, "logprobs": lp, "finish_reason": finish})
            }
        }
    }

    /// Log-probabilities of `tokens` in the endpoint's format; `offset` is the text length
    /// before them (completions' `text_offset`).
    fn logprobs(&self, tokens: &[(TokenLogprob, usize)]) -> Option<Value> {
        if !self.logprobs {
            return None;
        }
        Some(match self.endpoint {
            Endpoint::Chat => {
                let entry =
                    |t: &str, b: &[u8], l: f32| json!({"token": t, "logprob": l, "bytes": b});
                let content: Vec<Value> = tokens
                    .iter()
                    .map(|(t, _)| {
                        let mut e = entry(&t.token, &t.bytes, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|(s, b, l)| entry(s, b, *l)).collect();
                        e
                    })
                    .collect();
                json!({ "content": content })
            }
            Endpoint::Completions => json!({
                "tokens": tokens.iter().map(|(t, _)| &t.token).collect::<Vec<_>>(),
                "token_logprobs": tokens.iter().map(|(t, _)| t.logprob).collect::<Vec<_>>(),
                "top_logprobs": tokens.iter().map(|(t, _)| {
                    t.top.iter().map(|(s, _, l)| (s.clone(), json!(l))).collect::<serde_json::Map<_, _>>()
                }).collect::<Vec<_>>(),
                "text_offset": tokens.iter().map(|(_, o)| o).collect::<Vec<_>>(),
            }),
        })
    }

    /// A streamed piece of a message read for tool calls, as OpenAI's chunk delta.
    fn delta_chunk(&self, d: Delta, lp: Option<Value>) -> Value {
        let delta = match d {
            Delta::Content(text) => json!({ "content": text }),
            Delta::CallStart { index, id, name } => json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""},
            }]}),
            Delta::CallArguments { index, fragment } => json!({"tool_calls": [{
                "index": index, "function": {"arguments": fragment},
            }]}),
        };
        let choice = json!({"index": 0, "delta": delta, "logprobs": lp, "finish_reason": null});
        self.object(true, json!([choice]))
    }

    fn finished(&self) {
        self.metrics
            .request_seconds
            .observe(self.arrived.elapsed().as_secs_f64());
    }
}

/// A chat choice's message as the calls and content read from the reply: content `null` when
/// there is none, `finish_reason` "tool_calls" when the model stopped after calling.
fn tool_message(choice: &mut Value, p: &parse::Parsed, reason: FinishReason) {
    let msg = &mut choice["message"];
    msg["content"] = if p.content.is_empty() && !p.calls.is_empty() {
        Value::Null
    } else {
        json!(p.content)
    };
    if p.calls.is_empty() {
        return;
    }
    msg["tool_calls"] = p
        .calls
        .iter()
        .map(|c| {
            json!({"id": call_id(), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    choice["finish_reason"] = json!(finish_reason(reason, true));
}

/// "tool_calls" when the model stopped after calling; a reply cut by `max_tokens` stays
/// "length".
fn finish_reason(reason: FinishReason, called: bool) -> &'static str {
    match reason {
        FinishReason::Stop if called => "tool_calls",
        r => r.as_str(),
    }
}

fn usage(n_prompt: usize, n_cached: usize, n_gen: usize) -> Value {
    json!({
        "prompt_tokens": n_prompt,
        "completion_tokens": n_gen,
        "total_tokens": n_prompt + n_gen,
        "prompt_tokens_details": {"cached_tokens": n_cached},
    })
}

/// Waits for the whole generation and answers one JSON object. Dropping this future (the
/// client went away) drops the event receiver, which cancels the sequence.
pub async fn collect(mut reply: Reply) -> Response {
    let mut text = String::new();
    let mut lps = Vec::new();
    while let Some(ev) = reply.events.recv().await {
        match ev {
            Event::Token { text: t, logprob } => {
                if let Some(lp) = logprob {
                    lps.push((lp, text.len()));
                }
                text.push_str(&t);
            }
            Event::Done {
                reason,
                n_prompt,
                n_cached,
                n_gen,
            } => {
                reply.finished();
                let mut choice = reply.choice(false, &text, reply.logprobs(&lps), Some(reason));
                if let Some((format, parallel)) = reply.tools {
                    tool_message(&mut choice, &parse::reply(format, &text, parallel), reason);
                }
                let mut body = reply.object(false, json!([choice]));
                body["usage"] = usage(n_prompt, n_cached, n_gen);
                return Json(body).into_response();
            }
            Event::Failed(e) => return ApiError::internal(e).into_response(),
        }
    }
    ApiError::internal("the engine dropped the request").into_response()
}

/// Streams chunks as server-sent events. A relay task forwards engine events into the
/// response body; when the client disconnects, the body (and its receiver) is dropped, the
/// relay sees it and drops the engine's receiver, and the scheduler frees the slot.
pub fn stream(mut reply: Reply) -> Sse<ReceiverStream<Result<SseEvent, Infallible>>> {
    let (out, body) = mpsc::channel::<Result<SseEvent, Infallible>>(64);
    tokio::spawn(async move {
        let send = |v: Value| SseEvent::default().data(v.to_string());
        if reply.endpoint == Endpoint::Chat {
            let mut first = reply.choice(true, "", None, None);
            first["delta"]["role"] = json!("assistant");
            if out
                .send(Ok(send(reply.object(true, json!([first])))))
                .await
                .is_err()
            {
                return;
            }
        }
        let mut offset = 0;
        let mut tools = reply
            .tools
            .map(|(f, parallel)| ToolStream::new(f, parallel));
        // Log-probabilities of tokens whose text is not sent yet (held back by the reader).
        let mut held_lps = Vec::new();
        loop {
            let ev = tokio::select! {
                ev = reply.events.recv() => ev,
                _ = out.closed() => return,
            };
            let chunk = match ev {
                Some(Event::Token { text, logprob }) if tools.is_some() => {
                    held_lps.extend(logprob.map(|l| (l, offset)));
                    offset += text.len();
                    let deltas = tools.as_mut().map_or(vec![], |t| t.push(&text));
                    deltas
                        .into_iter()
                        .map(|d| {
                            let lp = reply.logprobs(&std::mem::take(&mut held_lps));
                            reply.delta_chunk(d, lp)
                        })
                        .collect()
                }
                Some(Event::Token { text, logprob }) => {
                    let lps: Vec<_> = logprob.into_iter().map(|l| (l, offset)).collect();
                    offset += text.len();
                    if text.is_empty() && lps.is_empty() {
                        continue;
                    }
                    let c = reply.choice(true, &text, reply.logprobs(&lps), None);
                    vec![reply.object(true, json!([c]))]
                }
                Some(Event::Done {
                    reason,
                    n_prompt,
                    n_cached,
                    n_gen,
                }) => {
                    reply.finished();
                    let mut chunks = vec![];
                    let mut called = false;
                    if let Some(t) = tools.as_mut() {
                        let (deltas, c) = t.finish();
                        for d in deltas {
                            let lp = reply.logprobs(&std::mem::take(&mut held_lps));
                            chunks.push(reply.delta_chunk(d, lp));
                        }
                        called = c;
                    }
                    let mut c = reply.choice(true, "", None, None);
                    c["finish_reason"] = json!(finish_reason(reason, called));
                    if reply.endpoint == Endpoint::Chat {
                        c["delta"] = json!({});
                    }
                    chunks.push(reply.object(true, json!([c])));
                    if reply.include_usage {
                        let mut u = reply.object(true, json!([]));
                        u["usage"] = usage(n_prompt, n_cached, n_gen);
                        chunks.push(u);
                    }
                    for c in chunks {
                        let _ = out.send(Ok(send(c))).await;
                    }
                    let _ = out.send(Ok(SseEvent::default().data("[DONE]"))).await;
                    return;
                }
                Some(Event::Failed(e)) => vec![ApiError::internal(e).to_json()],
                None => vec![ApiError::internal("the engine dropped the request").to_json()],
            };
            // A token may add nothing yet (UTF-8, a stop string or markup held back).
            let is_error = chunk.first().is_some_and(|c| c.get("error").is_some());
            for c in chunk {
                if out.send(Ok(send(c))).await.is_err() {
                    return;
                }
            }
            if is_error {
                return;
            }
        }
    });
    Sse::new(ReceiverStream::new(body))
}
