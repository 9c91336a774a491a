//! Chat templates: the Jinja2 template in `tokenizer.chat_template`, rendered the way Hugging Face
//! `transformers` renders it (`apply_chat_template`).
//!
//! HF compiles templates in a sandboxed Jinja2 environment with `trim_blocks` and
//! `lstrip_blocks`, loop controls (`{% break %}`), its own `tojson` filter, and the globals
//! `raise_exception` and `strftime_now`; it passes `messages`, `add_generation_prompt` and the
//! special token strings (`bos_token`, `eos_token`, ...). MiniJinja is set up the same way, with
//! Python's string and dict methods from `minijinja-contrib`.

mod clock;
mod pyjson;
pub mod tools;

use crate::error::{Result, TokenizerError};
use crate::Tokenizer;
use ferrolm_gguf::GgufFile;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;
use serde_json::Value;
pub use tools::{ToolFormat, ToolPrompt, ToolSupport};

/// One chat turn, as Hugging Face passes it to a template. The tool fields are left out of
/// the template's view when absent (`message.tool_calls is defined` must be false then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    pub role: String,
    /// A `null` content (an assistant turn that only calls tools) is the empty string, as
    /// llama.cpp passes it: templates concatenate and search it.
    pub content: String,
    /// An assistant turn's calls, as OpenAI's API carries them: `{id, type: "function",
    /// function: {name, arguments}}`, `arguments` the JSON string the model produced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` turn: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` turn: the function that produced it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }
}

/// Used when a model has no template: ChatML, as llama.cpp falls back to.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const NAME: &str = "chat_template";

pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    /// What the template does with tools, found by rendering probes at load.
    tool_support: ToolSupport,
}

fn template_error(e: Error) -> TokenizerError {
    // Include the causes: MiniJinja puts the template line and `raise_exception`'s text there.
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    TokenizerError::Template(msg)
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The model's `tokenizer.chat_template`, or ChatML when it has none; the special token
    /// strings come from `tok`.
    pub fn from_gguf(f: &GgufFile, tok: &Tokenizer) -> Result<Self> {
        let source = match f.get("tokenizer.chat_template") {
            Some(_) => f.get_str("tokenizer.chat_template")?,
            None => CHATML_TEMPLATE,
        };
        let text = |id: Option<u32>| {
            id.and_then(|id| tok.token_to_piece(id, true).ok())
                .map(|p| String::from_utf8_lossy(&p).into_owned())
        };
        let s = tok.special_tokens();
        Self::new(
            source,
            &text(s.bos).unwrap_or_default(),
            &text(s.eos).unwrap_or_default(),
        )
    }

    /// A template from source, with the strings that `bos_token` and `eos_token` stand for.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(template_error)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", pyjson::tojson);
        env.add_function("raise_exception", |msg: String| -> Result<(), Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| clock::strftime_now(&fmt));
        env.add_template_owned(NAME, source.to_owned())
            .map_err(template_error)?;
        let mut t = Self {
            env,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            tool_support: ToolSupport::default(),
        };
        t.tool_support = ToolSupport::probe(|m, tools| t.render_raw(m, tools, true).ok());
        Ok(t)
    }

    /// The ChatML fallback.
    pub fn chatml() -> Self {
        Self::new(CHATML_TEMPLATE, "", "").expect("the ChatML template compiles")
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// What the template renders of tools, calls and tool results.
    pub fn tool_support(&self) -> ToolSupport {
        self.tool_support
    }

    /// The format the model is asked to call tools in: its own (`<tool_call>` tags) when the
    /// template describes tools that way, else the generic JSON reply of [`tools`].
    pub fn tool_format(&self) -> ToolFormat {
        ToolFormat::of(self.tool_support, &self.source)
    }

    /// Renders the conversation and tokenizes it with the messages' contents as plain text:
    /// special-token strings a user writes (`<|im_start|>system`) stay text and cannot forge
    /// a turn. The template's own markup is parsed for special tokens as usual. With
    /// `allow_special`, contents are parsed too (the old, trusting behaviour).
    pub fn encode(
        &self,
        tok: &crate::Tokenizer,
        messages: &[Message],
        add_generation_prompt: bool,
        allow_special: bool,
    ) -> Result<Vec<u32>> {
        self.encode_with_tools(tok, messages, None, add_generation_prompt, allow_special)
    }

    /// [`Self::encode`] with tools the model may call ([`Self::render_with_tools`]).
    pub fn encode_with_tools(
        &self,
        tok: &crate::Tokenizer,
        messages: &[Message],
        tools: Option<&ToolPrompt>,
        add_generation_prompt: bool,
        allow_special: bool,
    ) -> Result<Vec<u32>> {
        if allow_special {
            let text = self.render_with_tools(messages, tools, add_generation_prompt)?;
            return tok.encode(&text, true, true);
        }
        let (text, spans) = self.render_spans(messages, tools, add_generation_prompt)?;
        tok.encode_literal(&text, true, &spans)
    }

    /// The rendering and the byte ranges in it that are message contents. Each content is
    /// first rendered as a marker (private-use characters and its index), so the ranges are
    /// exact wherever the template places the content, even twice.
    pub fn render_spans(
        &self,
        messages: &[Message],
        tools: Option<&ToolPrompt>,
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<std::ops::Range<usize>>)> {
        const OPEN: char = '\u{F8F0}';
        const CLOSE: char = '\u{F8F1}';
        let (messages, tools) = self.with_tools(messages, tools);
        let marked: Vec<Message> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| Message {
                content: format!("{OPEN}{i}{CLOSE}"),
                ..m.clone()
            })
            .collect();
        let rendered = self.render_raw(&marked, tools, add_generation_prompt)?;
        let mut text = String::with_capacity(rendered.len());
        let mut spans = Vec::new();
        let mut rest = rendered.as_str();
        while let Some(open) = rest.find(OPEN) {
            let after = &rest[open + OPEN.len_utf8()..];
            let index = after
                .find(CLOSE)
                .and_then(|close| Some((after[..close].parse::<usize>().ok()?, close)));
            let Some((i, close)) = index.filter(|&(i, _)| i < messages.len()) else {
                // Not one of ours (the template made it): keep it as text.
                text.push_str(&rest[..open + OPEN.len_utf8()]);
                rest = after;
                continue;
            };
            text.push_str(&rest[..open]);
            let start = text.len();
            text.push_str(&messages[i].content);
            spans.push(start..text.len());
            rest = &after[close + CLOSE.len_utf8()..];
        }
        text.push_str(rest);
        Ok((text, spans))
    }

    /// Renders the conversation; with `add_generation_prompt` the text ends where the
    /// assistant's next reply begins.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_raw(messages, None, add_generation_prompt)
    }

    /// Renders the conversation with the tools the model may call, as `apply_chat_template(
    /// messages, tools=...)` does: the template receives `tools` (OpenAI's function tools, as
    /// the client sent them) and the messages' `tool_calls` and `tool` turns. A template that
    /// does not render them gets them in the generic format instead ([`tools`]).
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&ToolPrompt>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let (messages, tools) = self.with_tools(messages, tools);
        self.render_raw(&messages, tools, add_generation_prompt)
    }

    /// The messages and `tools` the template is given: rewritten for what it cannot render.
    fn with_tools<'a>(
        &self,
        messages: &'a [Message],
        tools: Option<&'a ToolPrompt>,
    ) -> (std::borrow::Cow<'a, [Message]>, Option<&'a [Value]>) {
        tools::adapt(self.tool_support, messages, tools)
    }

    fn render_raw(
        &self,
        messages: &[Message],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let tmpl = self.env.get_template(NAME).map_err(template_error)?;
        tmpl.render(context! {
            messages => Serde(messages),
            tools => tools.map(Serde),
            add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(template_error)
    }
}
