//! The model's reply as OpenAI's message: text content and `tool_calls`.
//!
//! [`parse`] reads the whole reply, or the reply so far (`partial`). The so-far reading only
//! ever grows (content is extended, a call's arguments are a longer prefix of the same text,
//! calls are added), so streaming is the difference between two readings ([`ToolStream`]):
//! text before a call streams as content, a call opens with its id and name, then its
//! arguments stream as they come. Markup that may still become a call is held back, so no
//! part of it is ever sent as content.
//!
//! Formats ([`ToolFormat`]):
//! - Hermes/Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, any number,
//!   with text around them.
//! - Generic (llama.cpp's): a JSON reply, `{"tool_call": CALL}`, `{"tool_calls": [CALL...]}` or
//!   `{"response": "text"}`; a bare CALL or `[CALL...]` is taken too. A reply that is not JSON
//!   is content.
//!
//! A CALL is `{"name": ..., "arguments": {...}}` (`parameters` is taken for `arguments`); its
//! arguments are the model's own text of that value.

use super::json::{parse_prefix, Node, Value};
use ferrolm_tokenizer::chat::ToolFormat;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    /// The arguments' JSON text so far.
    pub arguments: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub content: String,
    /// Calls whose name is known; while partial, the last one's arguments may be incomplete.
    pub calls: Vec<Call>,
}

/// The whole reply: at most one call unless `parallel`.
pub fn reply(format: ToolFormat, text: &str, parallel: bool) -> Parsed {
    let mut p = parse(format, text, false);
    if !parallel {
        p.calls.truncate(1);
    }
    p
}

/// Reads `text` in `format`; `partial`: the reply is still being generated.
pub fn parse(format: ToolFormat, text: &str, partial: bool) -> Parsed {
    let mut p = match format {
        ToolFormat::Hermes => hermes(text, partial),
        ToolFormat::Generic => generic(text, partial),
    };
    if partial {
        // Whitespace may turn out to be what separates the text from a call.
        p.content.truncate(p.content.trim_end().len());
    } else if !p.calls.is_empty() {
        p.content.truncate(p.content.trim_end().len());
    }
    p
}

fn hermes(text: &str, partial: bool) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    loop {
        let Some(at) = rest.find(OPEN) else {
            // A tail that may be the start of `<tool_call>` is not content yet.
            let keep = if partial {
                rest.len() - partial_tag(rest, OPEN)
            } else {
                rest.len()
            };
            out.content.push_str(&rest[..keep]);
            return out;
        };
        out.content.push_str(&rest[..at]);
        let body = &rest[at + OPEN.len()..];
        let (inner, after) = match body.find(CLOSE) {
            Some(end) => (&body[..end], Some(&body[end + CLOSE.len()..])),
            None => (body, None),
        };
        let complete = after.is_some() || !partial;
        if let Some(call) = parse_prefix(inner).and_then(|v| call(inner, &v, complete)) {
            out.calls.push(call);
        } else if complete {
            // Not a call after all: the markup is text.
            out.content
                .push_str(&rest[at..rest.len() - after.unwrap_or("").len()]);
        }
        match after {
            Some(a) => rest = a,
            None => return out,
        }
    }
}

/// How many bytes at the end of `text` are a proper prefix of `tag`.
fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| text.ends_with(&tag[..n]))
        .unwrap_or(0)
}

fn generic(text: &str, partial: bool) -> Parsed {
    let start = text.len() - text.trim_start().len();
    let body = &text[start..];
    if !body.starts_with(['{', '[']) {
        return Parsed {
            content: text.to_owned(),
            calls: vec![],
        };
    }
    let as_text = || Parsed {
        // While it may still become a call, nothing is content.
        content: if partial {
            String::new()
        } else {
            text.to_owned()
        },
        calls: vec![],
    };
    let Some(v) = parse_prefix(text) else {
        return as_text();
    };
    // Whatever follows a finished reply is not part of it.
    let complete = v.complete || !partial;
    let calls = |items: &[&Value]| -> Vec<Call> {
        let last = items.len().saturating_sub(1);
        items
            .iter()
            .enumerate()
            .map_while(|(i, c)| call(text, c, complete || i < last))
            .collect()
    };
    fn list(v: &Value) -> Option<Vec<&Value>> {
        match &v.node {
            Node::Array(items) => Some(items.iter().collect()),
            _ => None,
        }
    }
    let found = if let Some(c) = v.get("tool_call") {
        Some(calls(&[c]))
    } else if let Some(cs) = v.get("tool_calls").and_then(list) {
        Some(calls(&cs))
    } else if v.get("name").is_some() {
        Some(calls(&[&v]))
    } else {
        list(&v).map(|cs| calls(&cs))
    };
    match (found, v.get("response")) {
        (Some(calls), _) if !calls.is_empty() || partial => Parsed {
            content: String::new(),
            calls,
        },
        (
            _,
            Some(Value {
                node: Node::String(s),
                ..
            }),
        ) => Parsed {
            content: s.clone(),
            calls: vec![],
        },
        _ => as_text(),
    }
}

/// A call from its object in `text`: the name once complete; the arguments' text so far.
/// With `complete`, only a whole call (object closed) counts.
fn call(text: &str, v: &Value, complete: bool) -> Option<Call> {
    if complete && !v.complete {
        return None;
    }
    let name = v.get("name").filter(|n| n.complete)?.as_str()?.to_owned();
    let args = v.get("arguments").or_else(|| v.get("parameters"));
    let arguments = match args {
        None if v.complete => "{}".to_owned(),
        None => String::new(),
        // Arguments written as a JSON string of JSON: the string is the text, once whole.
        Some(Value {
            node: Node::String(s),
            complete: true,
            ..
        }) => s.clone(),
        Some(Value {
            node: Node::String(_),
            ..
        }) => String::new(),
        Some(a) => text[a.span.clone()].to_owned(),
    };
    Some(Call { name, arguments })
}

/// One piece of a streamed message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    Content(String),
    /// A call begins: OpenAI's first delta of a call carries its index, id, type and name.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    CallArguments {
        index: usize,
        fragment: String,
    },
}

/// Streams a reply as [`Delta`]s: each push reads the reply so far and sends what is new.
pub struct ToolStream {
    format: ToolFormat,
    /// At most one call (`parallel_tool_calls: false`).
    single: bool,
    text: String,
    content_sent: usize,
    /// Per call sent: its arguments' length sent.
    args_sent: Vec<usize>,
}

impl ToolStream {
    pub fn new(format: ToolFormat, parallel: bool) -> Self {
        Self {
            format,
            single: !parallel,
            text: String::new(),
            content_sent: 0,
            args_sent: Vec::new(),
        }
    }

    /// The reply grew by `text`.
    pub fn push(&mut self, text: &str) -> Vec<Delta> {
        self.text.push_str(text);
        let p = parse(self.format, &self.text, true);
        self.deltas(p)
    }

    /// The reply is complete: the rest, and whether it called tools.
    pub fn finish(&mut self) -> (Vec<Delta>, bool) {
        let p = reply(self.format, &self.text, !self.single);
        let called = !p.calls.is_empty();
        (self.deltas(p), called)
    }

    fn deltas(&mut self, mut p: Parsed) -> Vec<Delta> {
        if self.single {
            p.calls.truncate(1);
        }
        let mut out = Vec::new();
        // Content only grows; a reading that does not extend what was sent sends nothing.
        if p.content.len() > self.content_sent && p.content.is_char_boundary(self.content_sent) {
            out.push(Delta::Content(p.content[self.content_sent..].to_owned()));
            self.content_sent = p.content.len();
        }
        for (index, c) in p.calls.into_iter().enumerate() {
            if index == self.args_sent.len() {
                out.push(Delta::CallStart {
                    index,
                    id: call_id(),
                    name: c.name,
                });
                self.args_sent.push(0);
            }
            let sent = self.args_sent[index];
            if c.arguments.len() > sent && c.arguments.is_char_boundary(sent) {
                out.push(Delta::CallArguments {
                    index,
                    fragment: c.arguments[sent..].to_owned(),
                });
                self.args_sent[index] = c.arguments.len();
            }
        }
        out
    }
}

/// OpenAI's call ids: `call_` and 24 random letters and digits.
pub fn call_id() -> String {
    use rand::distributions::{Alphanumeric, DistString};
    format!(
        "call_{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 24)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ToolFormat::*;

    fn calls(p: &Parsed) -> Vec<(&str, &str)> {
        p.calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn hermes_calls_with_text_around() {
        let t = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let p = parse(Hermes, t, false);
        assert_eq!(p.content, "Let me check.");
        assert_eq!(
            calls(&p),
            [
                ("get_weather", r#"{"city": "Paris"}"#),
                ("add", r#"{"a": 1}"#)
            ]
        );
        // Text alone is content; a tag around something that is not a call is text too.
        assert_eq!(
            parse(Hermes, "Hello there. ", false).content,
            "Hello there. "
        );
        let odd = "a <tool_call>not json</tool_call> b";
        assert_eq!(
            parse(Hermes, odd, false),
            Parsed {
                content: odd.into(),
                calls: vec![]
            }
        );
    }

    #[test]
    fn generic_replies() {
        let p = parse(
            Generic,
            r#"{"tool_call": {"name": "add", "arguments": {"a": 1, "b": 2}}}"#,
            false,
        );
        assert_eq!(
            (p.content.as_str(), calls(&p)),
            ("", vec![("add", r#"{"a": 1, "b": 2}"#)])
        );
        let p = parse(
            Generic,
            r#" {"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"x": 1}}]}"#,
            false,
        );
        assert_eq!(calls(&p), [("a", "{}"), ("b", r#"{"x": 1}"#)]);
        let p = parse(Generic, r#"{"response": "Hi \"you\"\n"}"#, false);
        assert_eq!((p.content.as_str(), p.calls.len()), ("Hi \"you\"\n", 0));
        // A bare call, a list, a string of arguments.
        let p = parse(
            Generic,
            r#"[{"name": "f", "arguments": "{\"q\": 1}"}]"#,
            false,
        );
        assert_eq!(calls(&p), [("f", r#"{"q": 1}"#)]);
        // Plain text, and JSON that is no call, are content.
        for t in ["Paris is the capital.", r#"{"answer": 42}"#, "{broken"] {
            assert_eq!(parse(Generic, t, false).content, t);
        }
    }

    /// Streams `text` cut into pieces of `step` bytes (on char boundaries) and checks the
    /// deltas add up to the whole reply's reading.
    fn stream(format: ToolFormat, text: &str, step: usize) -> (String, Vec<Call>, bool) {
        let mut s = ToolStream::new(format, true);
        let mut content = String::new();
        let mut out: Vec<Call> = Vec::new();
        let mut apply = |deltas: Vec<Delta>| {
            for d in deltas {
                match d {
                    Delta::Content(t) => content.push_str(&t),
                    Delta::CallStart { index, id, name } => {
                        assert_eq!(index, out.len());
                        assert!(id.starts_with("call_") && id.len() == 29);
                        out.push(Call {
                            name,
                            arguments: String::new(),
                        });
                    }
                    Delta::CallArguments { index, fragment } => {
                        out[index].arguments.push_str(&fragment)
                    }
                }
            }
        };
        let mut i = 0;
        while i < text.len() {
            let mut j = (i + step).min(text.len());
            while !text.is_char_boundary(j) {
                j += 1;
            }
            let d = s.push(&text[i..j]);
            // Tool-call markup never reaches the content.
            for x in &d {
                if let Delta::Content(t) = x {
                    assert!(!t.contains('<') || !text.contains(OPEN), "{t:?}");
                }
            }
            apply(d);
            i = j;
        }
        let (d, called) = s.finish();
        apply(d);
        (content, out, called)
    }

    #[test]
    fn streamed_fragments_add_up_to_the_whole() {
        let cases = [
            (Hermes, "Sure — checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"São Paulo\", \"days\": [1, 2]}}\n</tool_call>"),
            (Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"<y>\"}}\n</tool_call>"),
            (Hermes, "Just text, with a < sign and <b>tags</b>."),
            (Generic, r#"{"tool_call": {"name": "add", "arguments": {"a": 12, "b": -3}}}"#),
            (Generic, r#"{"tool_calls": [{"name": "a", "arguments": {"s": "é\n"}}, {"name": "b", "arguments": {}}]}"#),
            (Generic, r#"{"response": "Bonjour, ça va ?"}"#),
            (Generic, "Plain words."),
        ];
        for (format, text) in cases {
            let whole = parse(format, text, false);
            for step in [1, 2, 3, 7, 1000] {
                let (content, calls, called) = stream(format, text, step);
                assert_eq!(content, whole.content, "{text} by {step}");
                assert_eq!(calls, whole.calls, "{text} by {step}");
                assert_eq!(called, !whole.calls.is_empty());
            }
        }
    }

    #[test]
    fn a_call_opens_with_its_name_then_streams_arguments() {
        let mut s = ToolStream::new(Hermes, false);
        assert_eq!(s.push("Hi <tool"), [Delta::Content("Hi".into())]);
        assert_eq!(s.push("_call>\n{\"name\": \"f"), []);
        let d = s.push("\", \"arguments\": {\"a\"");
        assert!(
            matches!(&d[..], [Delta::CallStart { index: 0, name, .. }, Delta::CallArguments { index: 0, fragment }]
                if name == "f" && fragment == "{\"a\""),
            "{d:?}"
        );
        assert_eq!(
            s.push(": 1}}\n</tool_call>"),
            [Delta::CallArguments {
                index: 0,
                fragment: ": 1}".into()
            }]
        );
        // With parallel calls off, a second call is not sent.
        assert_eq!(
            s.push("<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"),
            []
        );
        assert_eq!(s.finish(), (vec![], true));
    }
}
