//! Structured output fields: `response_format` (OpenAI's) and `grammar` (llama.cpp's server
//! name for a GBNF grammar; Lark when it starts with `%llguidance`), parsed into the engine's
//! [`GrammarSpec`] and compiled against the model's vocabulary before the request is queued,
//! so a bad schema or grammar is a 400 naming the field and llguidance's reason.

use crate::error::ApiError;
use ferrolm_engine::constraint::{ConstraintVocab, Grammar, GrammarSpec};
use ferrolm_tokenizer::Tokenizer;
use serde_json::{Map, Value};
use std::sync::OnceLock;

/// What a request's output must match, with the field that asked for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    pub field: &'static str,
    pub spec: GrammarSpec,
}

/// Reads `response_format` and `grammar` (`null` is absent). At most one of them constrains.
pub fn parse(body: &Map<String, Value>) -> Result<Option<Constraint>, ApiError> {
    let get = |k: &str| body.get(k).filter(|v| !v.is_null());
    let format = match get("response_format") {
        None => None,
        Some(v) => response_format(v)?,
    };
    let grammar = match get("grammar") {
        None => None,
        Some(Value::String(g)) if !g.trim().is_empty() => Some(Constraint {
            field: "grammar",
            spec: GrammarSpec::from_grammar_text(g),
        }),
        Some(_) => {
            return Err(ApiError::invalid(
                "grammar",
                "'grammar' must be a non-empty string: a GBNF grammar, or llguidance Lark \
                 starting with %llguidance",
            ))
        }
    };
    match (format, grammar) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "grammar",
            "give either 'grammar' or a JSON 'response_format', not both",
        )),
        (f, g) => Ok(f.or(g)),
    }
}

fn response_format(v: &Value) -> Result<Option<Constraint>, ApiError> {
    let bad = |m: &str| ApiError::invalid("response_format", m);
    let Value::Object(o) = v else {
        return Err(bad("'response_format' must be an object with a 'type'"));
    };
    let constraint = |spec| {
        Some(Constraint {
            field: "response_format",
            spec,
        })
    };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        // llama.cpp's server also takes a schema right here.
        Some("json_object") => Ok(match o.get("schema").filter(|s| !s.is_null()) {
            None => constraint(GrammarSpec::JsonObject),
            Some(schema) => constraint(GrammarSpec::JsonSchema {
                schema: schema.clone(),
                strict: false,
            }),
        }),
        Some("json_schema") => {
            let Some(Value::Object(js)) = o.get("json_schema") else {
                return Err(bad(
                    "response_format of type 'json_schema' needs a 'json_schema' object \
                     ({name, schema, strict})",
                ));
            };
            if js.get("name").is_some_and(|n| !n.is_string()) {
                return Err(bad("response_format.json_schema.name must be a string"));
            }
            let strict = match js.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(bad("response_format.json_schema.strict must be a boolean")),
            };
            let schema = match js.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                // OpenAI lets it out: any JSON value (as an object, which is what clients parse).
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(_) => {
                    return Err(bad(
                        "response_format.json_schema.schema must be a JSON schema object",
                    ))
                }
            };
            Ok(constraint(GrammarSpec::JsonSchema { schema, strict }))
        }
        Some(t) => Err(bad(&format!(
            "response_format type '{t}' is not supported (text, json_object, json_schema)"
        ))),
        None => Err(bad("'response_format' needs a string 'type'")),
    }
}

/// The model's vocabulary for llguidance, built on the first constrained request.
#[derive(Default)]
pub struct LazyVocab(OnceLock<Result<ConstraintVocab, String>>);

impl LazyVocab {
    /// Compiles `c` (blocking: up to tens of milliseconds for a large schema, more on the
    /// first call, which builds the vocabulary).
    pub fn compile(
        &self,
        c: &Constraint,
        tok: &Tokenizer,
        n_vocab: usize,
    ) -> Result<Grammar, ApiError> {
        let vocab = self
            .0
            .get_or_init(|| ConstraintVocab::new(tok, n_vocab).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| ApiError::invalid(c.field, e.clone()))?;
        vocab
            .compile(&c.spec)
            .map_err(|e| ApiError::invalid(c.field, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(body: &str) -> Result<Option<Constraint>, ApiError> {
        let v: Value = serde_json::from_str(body).unwrap();
        parse(v.as_object().unwrap())
    }

    #[test]
    fn the_forms_parse() {
        assert_eq!(
            parsed(r#"{"response_format":{"type":"text"}}"#).unwrap(),
            None
        );
        assert_eq!(
            parsed(r#"{"response_format":null,"grammar":null}"#).unwrap(),
            None
        );
        let c = parsed(r#"{"response_format":{"type":"json_object"}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(c.spec, GrammarSpec::JsonObject);
        let c = parsed(
            r#"{"response_format":{"type":"json_schema","json_schema":
                {"name":"x","schema":{"type":"integer"},"strict":true}}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.spec,
            GrammarSpec::JsonSchema {
                schema: serde_json::json!({"type": "integer"}),
                strict: true
            }
        );
        let c = parsed(r#"{"grammar":"root ::= \"a\""}"#).unwrap().unwrap();
        assert!(matches!(c.spec, GrammarSpec::Gbnf(_)));
        assert_eq!(c.field, "grammar");
        let c = parsed(r#"{"grammar":"%llguidance {}\nstart: \"a\""}"#)
            .unwrap()
            .unwrap();
        assert!(matches!(c.spec, GrammarSpec::Lark(_)));
    }

    #[test]
    fn mistakes_name_their_field() {
        for (body, field) in [
            (r#"{"response_format":"json"}"#, "response_format"),
            (r#"{"response_format":{"type":"yaml"}}"#, "response_format"),
            (
                r#"{"response_format":{"type":"json_schema"}}"#,
                "response_format",
            ),
            (
                r#"{"response_format":{"type":"json_schema","json_schema":{"schema":3}}}"#,
                "response_format",
            ),
            (r#"{"grammar":7}"#, "grammar"),
            (
                r#"{"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}"#,
                "grammar",
            ),
        ] {
            let e = parsed(body).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(field), "{body}");
        }
    }
}
