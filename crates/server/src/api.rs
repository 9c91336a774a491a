//! Request bodies: parsed field by field from JSON, so that every mistake names its field and
//! unsupported features are refused instead of silently ignored.

use crate::error::ApiError;
use crate::structured::{self, Constraint};
use crate::tools::{self, ToolRequest};
use ferrolm_engine::SamplerConfig;
use ferrolm_tokenizer::Message;
use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

#[derive(Clone, Debug)]
pub enum Prompt {
    Chat(Vec<Message>),
    Text(String),
    Tokens(Vec<u32>),
}

/// How one sequence is generated, as the scheduler needs it.
#[derive(Clone, Debug)]
pub struct GenParams {
    /// `None`: until the end of the context.
    pub max_tokens: Option<usize>,
    pub sampler: SamplerConfig,
    pub stop: Vec<String>,
    /// OpenAI's: `logit -= presence·[count > 0] + frequency·count` over generated tokens.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// `Some(k)`: report each token's log-probability and its `k` best alternatives.
    pub logprobs: Option<usize>,
    /// Structured output (`response_format`, `grammar`), compiled before the job is queued.
    pub constraint: Option<Constraint>,
    /// `ignore_eos` (llama.cpp's and vLLM's extension, for load tests): end-of-generation
    /// tokens are never sampled, so a request runs to `max_tokens` (or a grammar's end).
    pub ignore_eos: bool,
}

#[derive(Clone, Debug)]
pub struct GenRequest {
    pub model: String,
    pub prompt: Prompt,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with token counts.
    pub include_usage: bool,
    pub params: GenParams,
    /// Chat's `tools`, `tool_choice` and `parallel_tool_calls`, when it offers tools.
    pub tools: Option<ToolRequest>,
}

const COMMON: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "n",
    "user",
    "response_format",
    "grammar",
    "ignore_eos",
];
const CHAT_ONLY: &[&str] = &[
    "messages",
    "top_logprobs",
    "max_completion_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
];
const COMPLETIONS_ONLY: &[&str] = &["prompt", "echo", "suffix", "best_of"];

/// A typed view of the body's fields; `null` counts as absent, as OpenAI's API treats it.
struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }

    fn number(&self, k: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            Some(x) => Err(ApiError::invalid(
                k,
                format!("'{k}' is {x}; it must be between {lo} and {hi}"),
            )),
            None => Err(ApiError::invalid(k, format!("'{k}' must be a number"))),
        }
    }

    fn integer(&self, k: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        match v.as_i64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            Some(x) => Err(ApiError::invalid(
                k,
                format!("'{k}' is {x}; it must be between {lo} and {hi}"),
            )),
            None => Err(ApiError::invalid(k, format!("'{k}' must be an integer"))),
        }
    }

    fn boolean(&self, k: &str) -> Result<Option<bool>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(ApiError::invalid(k, format!("'{k}' must be true or false"))),
        }
    }
}

/// Parses and validates a request body for `endpoint`.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<GenRequest, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_json(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(map) = &value else {
        return Err(ApiError::bad_json("the body must be a JSON object"));
    };
    let only = match endpoint {
        Endpoint::Chat => CHAT_ONLY,
        Endpoint::Completions => COMPLETIONS_ONLY,
    };
    // `null` is absent, for unsupported fields too (clients send `"tools": null`).
    if let Some(k) = map.iter().find_map(|(k, v)| {
        (!v.is_null() && !COMMON.contains(&k.as_str()) && !only.contains(&k.as_str())).then_some(k)
    }) {
        return Err(ApiError::invalid(k, format!("unsupported parameter '{k}'")));
    }
    let f = Fields(map);
    let model = match f.get("model") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::invalid("model", "'model' must be a string")),
        None => return Err(ApiError::invalid("model", "missing required field 'model'")),
    };
    if let Some(n) = f.integer("n", i64::MIN, i64::MAX)? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("n = {n} is not supported: this server returns one choice per request"),
            ));
        }
    }
    let prompt = match endpoint {
        Endpoint::Chat => Prompt::Chat(messages(f.get("messages"))?),
        Endpoint::Completions => completion_prompt(&f)?,
    };
    let stream = f.boolean("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => Fields(o).boolean("include_usage")?.unwrap_or(false),
        Some(_) => {
            return Err(ApiError::invalid(
                "stream_options",
                "'stream_options' must be an object",
            ))
        }
    };
    let tools = match endpoint {
        Endpoint::Chat => tools::request::parse(
            f.get("tools"),
            f.get("tool_choice"),
            f.boolean("parallel_tool_calls")?,
        )?,
        Endpoint::Completions => None,
    };
    Ok(GenRequest {
        model,
        prompt,
        stream,
        include_usage,
        params: params(endpoint, &f)?,
        tools,
    })
}

fn params(endpoint: Endpoint, f: &Fields) -> Result<GenParams, ApiError> {
    let max_tokens = match f.integer("max_completion_tokens", 1, i64::MAX)? {
        Some(n) => Some(n),
        None => f.integer("max_tokens", 1, i64::MAX)?,
    };
    let logprobs = match endpoint {
        Endpoint::Chat => {
            let on = f.boolean("logprobs")?.unwrap_or(false);
            let top = f.integer("top_logprobs", 0, 20)?;
            if top.is_some() && !on {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "'top_logprobs' needs 'logprobs': true",
                ));
            }
            on.then(|| top.unwrap_or(0) as usize)
        }
        Endpoint::Completions => f.integer("logprobs", 0, 5)?.map(|k| k as usize),
    };
    let seed = match f.get("seed") {
        None => rand::random(),
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(s), _) => s,
            (None, Some(s)) => s as u64,
            _ => return Err(ApiError::invalid("seed", "'seed' must be an integer")),
        },
    };
    let sampler = SamplerConfig {
        temperature: f.number("temperature", 0.0, 2.0)?.unwrap_or(1.0) as f32,
        top_k: f.integer("top_k", 0, i64::MAX)?.unwrap_or(0) as usize,
        top_p: f.number("top_p", 0.0, 1.0)?.unwrap_or(1.0) as f32,
        min_p: f.number("min_p", 0.0, 1.0)?.unwrap_or(0.0) as f32,
        repeat_penalty: 1.0,
        seed,
        ..SamplerConfig::default()
    };
    Ok(GenParams {
        max_tokens: max_tokens.map(|n| n as usize),
        sampler,
        stop: stop(f.get("stop"))?,
        presence_penalty: f.number("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32,
        frequency_penalty: f.number("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32,
        logprobs,
        constraint: structured::parse(f.0)?,
        ignore_eos: f.boolean("ignore_eos")?.unwrap_or(false),
    })
}

fn stop(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::invalid(
            "stop",
            "'stop' must be a string or up to 4 non-empty strings",
        )
    };
    let stops = match v {
        None => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => a
            .iter()
            .map(|s| s.as_str().map(str::to_owned).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if stops.iter().any(String::is_empty) {
        return Err(bad());
    }
    Ok(stops)
}

fn messages(v: Option<&Value>) -> Result<Vec<Message>, ApiError> {
    let bad = |m: String| ApiError::invalid("messages", m);
    let Some(Value::Array(items)) = v else {
        return Err(bad(
            "'messages' is required: an array of {role, content} objects".into(),
        ));
    };
    if items.is_empty() {
        return Err(bad("'messages' must not be empty".into()));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("messages[{i}] needs a string 'role'")))?;
            if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
                return Err(bad(format!(
                    "messages[{i}]: role '{role}' is not supported (system, developer, user, \
                     assistant, tool)"
                )));
            }
            let role = if role == "developer" { "system" } else { role };
            let tool_calls = match role {
                "assistant" => tool_calls(m.get("tool_calls"), i)?,
                _ => None,
            };
            // An assistant turn that only calls tools has no content.
            let text = match m.get("content") {
                None | Some(Value::Null) if tool_calls.is_some() => String::new(),
                v => content(v, i)?,
            };
            let mut msg = Message::new(role, text);
            msg.tool_calls = tool_calls;
            if role == "tool" {
                msg.tool_call_id = Some(
                    m.get("tool_call_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            bad(format!(
                                "messages[{i}]: a tool message needs a string 'tool_call_id'"
                            ))
                        })?
                        .to_owned(),
                );
                msg.name = m.get("name").and_then(Value::as_str).map(str::to_owned);
            }
            Ok(msg)
        })
        .collect()
}

/// An assistant turn's `tool_calls`: `[{id, type: "function", function: {name, arguments}}]`,
/// kept as sent (templates read them as Hugging Face passes them). `None` when absent or empty.
fn tool_calls(v: Option<&Value>, i: usize) -> Result<Option<Vec<Value>>, ApiError> {
    let calls = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(calls)) if calls.is_empty() => return Ok(None),
        Some(Value::Array(calls)) => calls,
        Some(_) => {
            return Err(ApiError::invalid(
                "messages",
                format!("messages[{i}].tool_calls must be an array"),
            ))
        }
    };
    for (j, c) in calls.iter().enumerate() {
        let f = c.get("function");
        let ok = c.get("id").is_some_and(Value::is_string)
            && c.get("type").is_none_or(|t| t == "function")
            && f.and_then(|f| f.get("name")).is_some_and(Value::is_string)
            && f.and_then(|f| f.get("arguments"))
                .is_some_and(Value::is_string);
        if !ok {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "messages[{i}].tool_calls[{j}] must be {{\"id\": string, \"type\": \
                     \"function\", \"function\": {{\"name\": string, \"arguments\": string}}}}"
                ),
            ));
        }
    }
    Ok(Some(calls.clone()))
}

/// A message's content: a string, or an array of `{"type": "text", "text": ...}` parts.
fn content(v: Option<&Value>, i: usize) -> Result<String, ApiError> {
    let bad = || {
        ApiError::invalid(
            "messages",
            format!("messages[{i}].content must be a string or an array of text parts"),
        )
    };
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(
                |p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => Ok(t.as_str()),
                    _ => Err(bad()),
                },
            )
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.concat()),
        _ => Err(bad()),
    }
}

fn completion_prompt(f: &Fields) -> Result<Prompt, ApiError> {
    if f.boolean("echo")?.unwrap_or(false) {
        return Err(ApiError::invalid("echo", "'echo' is not supported"));
    }
    if f.get("suffix").is_some() {
        return Err(ApiError::invalid("suffix", "'suffix' is not supported"));
    }
    if f.integer("best_of", i64::MIN, i64::MAX)?
        .is_some_and(|b| b != 1)
    {
        return Err(ApiError::invalid(
            "best_of",
            "'best_of' other than 1 is not supported",
        ));
    }
    let bad = || {
        ApiError::invalid(
            "prompt",
            "'prompt' is required: a string, or one string or token-id array in an array \
             (several prompts per request are not supported)",
        )
    };
    let tokens = |a: &[Value]| -> Result<Prompt, ApiError> {
        a.iter()
            .map(|t| {
                t.as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .ok_or_else(bad)
            })
            .collect::<Result<_, _>>()
            .map(Prompt::Tokens)
    };
    match f.get("prompt") {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            Ok(Prompt::Text(a[0].as_str().unwrap_or_default().to_owned()))
        }
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => {
            tokens(a[0].as_array().map_or(&[][..], |v| v))
        }
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_number) => tokens(a),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(endpoint: Endpoint, body: &str) -> ApiError {
        parse(endpoint, body.as_bytes()).unwrap_err()
    }

    #[test]
    fn every_mistake_is_a_400_naming_its_field() {
        use Endpoint::*;
        let cases = [
            (Chat, "{", None),
            (Chat, "[]", None),
            (
                Chat,
                r#"{"messages":[{"role":"user","content":"hi"}]}"#,
                Some("model"),
            ),
            (Chat, r#"{"model":"m"}"#, Some("messages")),
            (Chat, r#"{"model":"m","messages":[]}"#, Some("messages")),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#,
                Some("messages"),
            ),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}"#,
                Some("n"),
            ),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
                Some("temperature"),
            ),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[]}"#,
                Some("tools"),
            ),
            (
                Completions,
                r#"{"model":"m","prompt":"a","response_format":{"type":"xml"}}"#,
                Some("response_format"),
            ),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":3}"#,
                Some("top_logprobs"),
            ),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
                Some("max_tokens"),
            ),
            (
                Chat,
                r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stop":[""]}"#,
                Some("stop"),
            ),
            (
                Completions,
                r#"{"model":"m","prompt":"x","ignore_eos":"yes"}"#,
                Some("ignore_eos"),
            ),
            (
                Completions,
                r#"{"model":"m","prompt":["a","b"]}"#,
                Some("prompt"),
            ),
            (
                Completions,
                r#"{"model":"m","prompt":"a","echo":true}"#,
                Some("echo"),
            ),
            (
                Completions,
                r#"{"model":"m","prompt":"a","best_of":3}"#,
                Some("best_of"),
            ),
            (
                Completions,
                r#"{"model":"m","prompt":"a","logprobs":9}"#,
                Some("logprobs"),
            ),
        ];
        for (ep, body, param) in cases {
            let e = err(ep, body);
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert_eq!(e.param.as_deref(), param, "{body}: {}", e.message);
        }
    }

    #[test]
    fn a_full_request_parses() {
        let r = parse(
            Endpoint::Chat,
            br#"{"model":"m","messages":[{"role":"system","content":"be brief"},
                {"role":"user","content":[{"type":"text","text":"hi"}]}],
                "stream":true,"stream_options":{"include_usage":true},"max_tokens":5,
                "temperature":0,"top_p":0.9,"top_k":4,"min_p":0.1,"stop":["x","y"],"seed":7,
                "presence_penalty":0.5,"frequency_penalty":-0.5,"logprobs":true,
                "top_logprobs":2,"n":1,"user":null,"ignore_eos":true}"#,
        )
        .unwrap();
        assert!(r.stream && r.include_usage);
        let p = r.params;
        assert_eq!(p.max_tokens, Some(5));
        assert_eq!(p.sampler.temperature, 0.0);
        assert_eq!(p.sampler.top_k, 4);
        assert_eq!(p.sampler.seed, 7);
        assert_eq!(p.stop, ["x", "y"]);
        assert_eq!(p.logprobs, Some(2));
        assert!(p.ignore_eos);
        let Prompt::Chat(m) = r.prompt else {
            panic!("a chat prompt")
        };
        assert_eq!(m[1].content, "hi");
    }

    #[test]
    fn tool_turns_parse_and_bad_ones_name_messages() {
        let call = r#"{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}"#;
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"x"}},
                {{"role":"assistant","content":null,"tool_calls":[{call}]}},
                {{"role":"tool","tool_call_id":"call_1","content":"42"}}],
                "tools":[{{"type":"function","function":{{"name":"f"}}}}],
                "tool_choice":"required","parallel_tool_calls":false}}"#
        );
        let r = parse(Endpoint::Chat, body.as_bytes()).unwrap();
        let Prompt::Chat(m) = r.prompt else {
            panic!("a chat prompt")
        };
        assert_eq!(m[1].content, "");
        assert_eq!(m[1].tool_calls.as_ref().unwrap().len(), 1);
        assert_eq!(m[2].tool_call_id.as_deref(), Some("call_1"));
        let t = r.tools.unwrap();
        assert!(!t.parallel && t.forced().is_some());
        for bad in [
            r#"{"role":"tool","content":"42"}"#,
            r#"{"role":"assistant","content":null}"#,
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f"}}]}"#,
            r#"{"role":"assistant","tool_calls":{"id":"c"}}"#,
        ] {
            let body = format!(r#"{{"model":"m","messages":[{bad}]}}"#);
            assert_eq!(
                err(Endpoint::Chat, &body).param.as_deref(),
                Some("messages"),
                "{bad}"
            );
        }
        // Completions take no tools.
        let e = err(
            Endpoint::Completions,
            r#"{"model":"m","prompt":"a","tools":[{"type":"function","function":{"name":"f"}}]}"#,
        );
        assert_eq!(e.param.as_deref(), Some("tools"));
    }
}
