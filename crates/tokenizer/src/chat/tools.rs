//! Tools in chat templates: what a template renders of them, the format the model is asked
//! to call them in, and the generic format for templates that render none.
//!
//! A template's support is found as minja (llama.cpp's template engine) finds it: by rendering
//! probes and looking for their markers in the output, so no template is recognised by name.
//! - Templates that render `tools` get them as Hugging Face passes them, and so do the
//!   messages' `tool_calls` and `tool` turns when the template renders those.
//! - Templates that render no tools (SmolLM2-135M-Instruct's) get llama.cpp's generic format:
//!   a system message that lists the tools (as JSON) and asks for a JSON reply,
//!   `{"tool_call": {"name", "arguments"}}` (`{"tool_calls": [...]}` with parallel calls) or
//!   `{"response": "..."}`; earlier calls and tool results are written into the history in the
//!   same JSON. The server parses that reply, and may constrain generation to it.

use super::Message;
use serde_json::{json, Value};
use std::borrow::Cow;

/// The tools a request offers, as the client sent them (OpenAI function tools).
#[derive(Clone, Debug, Default)]
pub struct ToolPrompt {
    pub tools: Vec<Value>,
    /// Whether the model may answer several calls at once (`parallel_tool_calls`).
    pub parallel: bool,
}

/// What a template renders: each flag is true when a probe's marker reached the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolSupport {
    /// The `tools` variable (their names appear).
    pub tools: bool,
    /// An assistant message's `tool_calls` (their arguments appear).
    pub tool_calls: bool,
    /// `tool` messages (their content appears).
    pub tool_responses: bool,
}

/// How the model is asked to write a call, and so how its reply is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes/Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, after
    /// optional text.
    Hermes,
    /// The generic JSON reply above.
    Generic,
}

impl ToolFormat {
    /// Hermes when the template describes tools with `<tool_call>` tags, else generic.
    pub fn of(support: ToolSupport, source: &str) -> Self {
        if support.tools && source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else {
            ToolFormat::Generic
        }
    }
}

const PROBE_TOOL: &str = "ferrolm_probe_tool";
const PROBE_ARG: &str = "ferrolm_probe_argument";
const PROBE_RESULT: &str = "ferrolm_probe_result";

impl ToolSupport {
    /// Renders three probes with `render` (`None`: the template failed on it).
    pub(crate) fn probe(render: impl Fn(&[Message], Option<&[Value]>) -> Option<String>) -> Self {
        let tool = json!({
            "type": "function",
            "function": {
                "name": PROBE_TOOL,
                "description": "A probe.",
                "parameters": {"type": "object", "properties": {PROBE_ARG: {"type": "string"}}},
            },
        });
        let user = Message::new("user", "Hi");
        let call = Message {
            tool_calls: Some(vec![json!({
                "id": "call_probe",
                "type": "function",
                "function": {"name": "probe_call", "arguments": format!("{{\"{PROBE_ARG}\": 1}}")},
            })]),
            ..Message::new("assistant", "")
        };
        let result = Message {
            tool_call_id: Some("call_probe".into()),
            name: Some("probe_call".into()),
            ..Message::new("tool", PROBE_RESULT)
        };
        let shows = |messages: &[Message], tools: Option<&[Value]>, marker: &str| {
            render(messages, tools).is_some_and(|out| out.contains(marker))
        };
        ToolSupport {
            tools: shows(
                std::slice::from_ref(&user),
                Some(std::slice::from_ref(&tool)),
                PROBE_TOOL,
            ),
            tool_calls: shows(&[user.clone(), call.clone()], None, PROBE_ARG),
            tool_responses: shows(&[user, call, result], None, PROBE_RESULT),
        }
    }
}

/// The messages and `tools` a template is given, with what it cannot render rewritten into
/// the generic format. Without tools, the conversation is the template's as is (Hugging
/// Face's rendering, `tool` turns included).
pub(crate) fn adapt<'a>(
    support: ToolSupport,
    messages: &'a [Message],
    tools: Option<&'a ToolPrompt>,
) -> (Cow<'a, [Message]>, Option<&'a [Value]>) {
    let Some(tools) = tools.filter(|t| !t.tools.is_empty()) else {
        return (Cow::Borrowed(messages), None);
    };
    let parallel = tools.parallel;
    let generic = !support.tools;
    let calls_as_text = generic || !support.tool_calls;
    let results_as_text = generic || !support.tool_responses;
    let rewrite = |m: &Message| {
        (calls_as_text && m.tool_calls.is_some()) || (results_as_text && m.role == "tool")
    };
    let native = (!generic).then_some(tools.tools.as_slice());
    let system = generic.then(|| system_text(tools));
    if system.is_none() && !messages.iter().any(rewrite) {
        return (Cow::Borrowed(messages), native);
    }
    let mut out: Vec<Message> = messages
        .iter()
        .map(|m| match m {
            m if calls_as_text && m.tool_calls.is_some() => calls_message(m, parallel),
            m if results_as_text && m.role == "tool" => result_message(m),
            m => m.clone(),
        })
        .collect();
    if let Some(text) = system {
        match out.first_mut() {
            Some(first) if first.role == "system" => {
                first.content = format!("{}\n\n{text}", first.content);
            }
            _ => out.insert(0, Message::new("system", text)),
        }
    }
    (Cow::Owned(out), native)
}

/// The generic format's instructions (llama.cpp's wording), with the tools as indented JSON.
fn system_text(tools: &ToolPrompt) -> String {
    let listed = serde_json::to_string_pretty(&tools.tools).unwrap_or_default();
    let example = if tools.parallel {
        r#"{"tool_calls": [{"name": "<function name>", "arguments": {<arguments object>}}]}"#
    } else {
        r#"{"tool_call": {"name": "<function name>", "arguments": {<arguments object>}}}"#
    };
    let key = if tools.parallel {
        "tool_calls"
    } else {
        "tool_call"
    };
    format!(
        "Respond in JSON format, either with `{key}` (a request to call tools) or with \
         `response` reply to the user's request.\n\nYou can call any of the following tools to \
         satisfy the user's requests: {listed}\n\nExample tool call syntax:\n\n{example}\n\n\
         Example reply:\n\n{{\"response\": \"<your reply>\"}}"
    )
}

/// One call of an assistant message, `{"name", "arguments"}` with the arguments as JSON when
/// they parse (they are a string in OpenAI's messages).
fn generic_call(call: &Value) -> Value {
    let f = call.get("function").unwrap_or(call);
    let args = match f.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| json!(s)),
        Some(v) => v.clone(),
        None => json!({}),
    };
    json!({"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args})
}

/// An assistant turn's calls written as the generic reply it would have been.
fn calls_message(m: &Message, parallel: bool) -> Message {
    let calls: Vec<Value> = m.tool_calls.iter().flatten().map(generic_call).collect();
    let reply = match calls.as_slice() {
        [one] if !parallel => json!({ "tool_call": one }),
        _ => json!({ "tool_calls": calls }),
    };
    let reply = reply.to_string();
    let content = if m.content.is_empty() {
        reply
    } else {
        format!("{}\n{reply}", m.content)
    };
    Message::new(m.role.clone(), content)
}

/// A `tool` turn as a user turn carrying `{"tool_response": {...}}`.
fn result_message(m: &Message) -> Message {
    let mut r = serde_json::Map::new();
    if let Some(name) = &m.name {
        r.insert("tool".into(), json!(name));
    }
    if let Some(id) = &m.tool_call_id {
        r.insert("tool_call_id".into(), json!(id));
    }
    r.insert("content".into(), json!(m.content));
    Message::new("user", json!({ "tool_response": r }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatTemplate;

    const SMOLLM2: &str = include_str!("../../tests/fixtures/chat/smollm2.jinja");
    const QWEN3: &str = include_str!("../../tests/fixtures/chat/qwen3.jinja");

    fn weather() -> ToolPrompt {
        ToolPrompt {
            tools: vec![json!({"type": "function", "function": {
                "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}})],
            parallel: false,
        }
    }

    #[test]
    fn probes_tell_a_tool_template_from_one_without() {
        let smol = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        assert_eq!(
            smol.tool_support(),
            ToolSupport {
                tools: false,
                tool_calls: false,
                tool_responses: true
            }
        );
        assert_eq!(smol.tool_format(), ToolFormat::Generic);
        let qwen = ChatTemplate::new(QWEN3, "", "<|im_end|>").unwrap();
        assert_eq!(
            qwen.tool_support(),
            ToolSupport {
                tools: true,
                tool_calls: true,
                tool_responses: true
            }
        );
        assert_eq!(qwen.tool_format(), ToolFormat::Hermes);
        assert_eq!(ChatTemplate::chatml().tool_format(), ToolFormat::Generic);
    }

    #[test]
    fn a_template_without_tools_gets_the_generic_format() {
        let smol = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let call = Message {
            tool_calls: Some(vec![json!({"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}})]),
            ..Message::new("assistant", "")
        };
        let result = Message {
            tool_call_id: Some("call_1".into()),
            ..Message::new("tool", "18 C")
        };
        let messages = [Message::new("user", "Weather in Paris?"), call, result];
        let out = smol
            .render_with_tools(&messages, Some(&weather()), true)
            .unwrap();
        // The system turn replaces SmolLM2's default one and lists the tool.
        assert!(
            out.starts_with("<|im_start|>system\nRespond in JSON format"),
            "{out}"
        );
        assert!(out.contains("\"name\": \"get_weather\""), "{out}");
        assert!(!out.contains("SmolLM"), "{out}");
        assert!(out.contains(
            "<|im_start|>assistant\n{\"tool_call\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}<|im_end|>"
        ), "{out}");
        assert!(out.contains(
            "<|im_start|>user\n{\"tool_response\":{\"tool_call_id\":\"call_1\",\"content\":\"18 C\"}}<|im_end|>"
        ), "{out}");
        assert!(out.ends_with("<|im_start|>assistant\n"));
        // Without tools, nothing changes.
        let plain = [Message::new("user", "Hi")];
        assert_eq!(
            smol.render_with_tools(&plain, None, true).unwrap(),
            smol.render(&plain, true).unwrap()
        );
    }

    #[test]
    fn an_existing_system_turn_keeps_its_text_first() {
        let smol = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let messages = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        let mut tools = weather();
        tools.parallel = true;
        let out = smol
            .render_with_tools(&messages, Some(&tools), true)
            .unwrap();
        assert!(
            out.starts_with(
                "<|im_start|>system\nBe brief.\n\nRespond in JSON format, either with `tool_calls`"
            ),
            "{out}"
        );
    }
}
