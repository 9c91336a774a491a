//! The grammar a reply must match when the request asks for calls: with `tool_choice`
//! `required` or naming a function, generation is constrained to a valid call (the tool's
//! name and its parameters' schema), in the format the model was asked to use.
//! - Generic format: the JSON reply as a JSON schema, `{"tool_call": CALL}` (or
//!   `{"tool_calls": [CALL, ...]}` with parallel calls; one when a function is named). With
//!   `auto`, llama.cpp's choice: that or `{"response": "..."}`, so a model that cannot follow
//!   the instructions still answers in the shape that is read back.
//! - Hermes: Lark, `<tool_call>\n` CALL `\n</tool_call>` (repeated with parallel calls and
//!   `required`); `auto` is left free (the model may answer in text).
//!
//! A CALL is `{"name": NAME, "arguments": PARAMETERS}` with no other keys: one schema per
//! tool, `anyOf` when several may be called. The JSON is written as the templates show it to
//! the model (`", "` and `": "` between items and keys, no other whitespace, so a model cannot
//! fill `max_tokens` with spaces).

use super::{Tool, ToolChoice, ToolRequest};
use crate::error::ApiError;
use crate::structured::Constraint;
use ferrolm_engine::constraint::GrammarSpec;
use ferrolm_tokenizer::chat::ToolFormat;
use serde_json::{json, Value};

/// What a chat request's reply must match: a forced call's grammar, or the structured-output
/// one (`response_format`, `grammar`). A forced call with either is a 400, as llama.cpp
/// refuses a grammar with tools; with `auto`, structured output wins.
pub fn choose(
    format: ToolFormat,
    tools: Option<&ToolRequest>,
    structured: Option<&Constraint>,
) -> Result<Option<Constraint>, ApiError> {
    let Some(req) = tools.filter(|t| t.active()) else {
        return Ok(structured.cloned());
    };
    match (structured, spec(format, req)) {
        (Some(c), _) if req.forced().is_some() => Err(ApiError::invalid(
            "tool_choice",
            format!(
                "a forced tool call ('tool_choice' {}) cannot be combined with '{}'",
                match &req.choice {
                    ToolChoice::Function(n) => format!("naming '{n}'"),
                    _ => "\"required\"".into(),
                },
                c.field
            ),
        )),
        (Some(c), _) => Ok(Some(c.clone())),
        (None, spec) => Ok(spec.map(|spec| Constraint {
            field: "tools",
            spec,
        })),
    }
}

/// The grammar for `req` in `format`; `None` when the reply is free.
pub fn spec(format: ToolFormat, req: &ToolRequest) -> Option<GrammarSpec> {
    let auto = req.choice == ToolChoice::Auto;
    // A named function is called once, as OpenAI does.
    let named = matches!(req.choice, ToolChoice::Function(_));
    let tools: Vec<&Tool> = match req.forced() {
        Some(t) => t,
        None if auto && format == ToolFormat::Generic => req.tools.iter().collect(),
        None => return None,
    };
    let strict = tools.iter().all(|t| t.strict);
    let call = match tools.as_slice() {
        [one] => call_schema(one),
        many => json!({ "anyOf": many.iter().map(|t| call_schema(t)).collect::<Vec<_>>() }),
    };
    let style = |mut schema: Value| {
        schema["x-guidance"] = json!({
            "whitespace_flexible": false,
            "item_separator": ", ",
            "key_separator": ": ",
            "lenient": !strict,
        });
        schema
    };
    match format {
        ToolFormat::Generic => {
            let calls = if req.parallel {
                let mut list = json!({"type": "array", "items": call, "minItems": 1});
                if named {
                    list["maxItems"] = json!(1);
                }
                object("tool_calls", list)
            } else {
                object("tool_call", call)
            };
            let schema = if auto {
                json!({"anyOf": [calls, object("response", json!({"type": "string"}))]})
            } else {
                calls
            };
            Some(GrammarSpec::JsonSchema {
                schema: style(schema),
                strict,
            })
        }
        ToolFormat::Hermes => {
            let more = if req.parallel && !named {
                " (\"\\n\" call)*"
            } else {
                ""
            };
            let mut lark = format!(
                "start: call{more}\ncall: \"<tool_call>\\n\" args \"\\n</tool_call>\"\nargs: %json "
            );
            lark.push_str(&style(call).to_string());
            lark.push('\n');
            Some(GrammarSpec::Lark(lark))
        }
    }
}

/// `{"name": NAME, "arguments": PARAMETERS}`, in that order, nothing else.
fn call_schema(t: &Tool) -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"const": t.name},
            "arguments": t.parameters,
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// An object with one required key.
fn object(key: &str, value: Value) -> Value {
    json!({
        "type": "object",
        "properties": { key: value },
        "required": [key],
        "additionalProperties": false,
    })
}
