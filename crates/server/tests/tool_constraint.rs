//! The grammars that force a tool call, compiled against the default model's vocabulary:
//! a valid call in the request's format is accepted token by token and may end; a call of
//! another tool, arguments outside the schema, or text instead of a call are refused.

use ferrolm_engine::constraint::{ConstraintVocab, GrammarSpec};
use ferrolm_gguf::GgufFile;
use ferrolm_server::tools::{constrain, request};
use ferrolm_tokenizer::chat::ToolFormat;
use ferrolm_tokenizer::Tokenizer;
use serde_json::{json, Value};

fn vocab() -> (Tokenizer, ConstraintVocab) {
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    let tok = Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
    let vocab = ConstraintVocab::new(&tok, tok.n_vocab()).unwrap();
    (tok, vocab)
}

fn tools_request(choice: Value, parallel: bool) -> request::ToolRequest {
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": false}}},
    ]);
    request::parse(Some(&tools), Some(&choice), Some(parallel))
        .unwrap()
        .unwrap()
}

/// Whether `text` (tokenized as plain text) is a complete output of the grammar.
fn accepts(tok: &Tokenizer, vocab: &ConstraintVocab, spec: &GrammarSpec, text: &str) -> bool {
    let grammar = vocab
        .compile(spec)
        .unwrap_or_else(|e| panic!("{e}\n{spec:?}"));
    let mut m = grammar.matcher();
    for t in tok.encode(text, false, false).unwrap() {
        let mask = m.compute_mask().unwrap();
        if !mask.allows(t) || m.accept(t).is_err() {
            return false;
        }
    }
    m.compute_mask().unwrap();
    m.accept(tok.eos().unwrap()).is_ok()
}

#[test]
fn forced_calls_admit_only_valid_calls() {
    let (tok, vocab) = vocab();
    let named = json!({"type": "function", "function": {"name": "add"}});
    let add = r#"{"name": "add", "arguments": {"a": 1, "b": 22}}"#;
    let weather = r#"{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}"#;
    let bad_args = r#"{"name": "add", "arguments": {"a": "x", "b": 1}}"#;
    let hermes = |calls: &[&str]| {
        calls
            .iter()
            .map(|c| format!("<tool_call>\n{c}\n</tool_call>"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    use ToolFormat::{Generic, Hermes};
    let required = json!("required");
    let auto = json!("auto");
    #[rustfmt::skip]
    let cases = [
        // (format, tool_choice, parallel, output, accepted)
        (Generic, &named, false, format!(r#"{{"tool_call": {add}}}"#), true),
        (Generic, &named, false, format!(r#"{{"tool_call": {weather}}}"#), false),
        (Generic, &named, false, format!(r#"{{"tool_call": {bad_args}}}"#), false),
        (Generic, &named, false, r#"{"response": "hi"}"#.into(), false),
        (Generic, &required, true, format!(r#"{{"tool_calls": [{weather}, {add}]}}"#), true),
        (Generic, &required, true, r#"{"tool_calls": []}"#.into(), false),
        (Generic, &auto, false, r#"{"response": "hi"}"#.into(), true),
        (Generic, &auto, false, format!(r#"{{"tool_call": {weather}}}"#), true),
        (Generic, &auto, false, "hi".into(), false),
        (Hermes, &named, false, hermes(&[add]), true),
        (Hermes, &named, false, format!("Sure. {}", hermes(&[add])), false),
        (Hermes, &named, false, hermes(&[bad_args]), false),
        (Hermes, &required, true, hermes(&[add, weather]), true),
        (Hermes, &required, false, hermes(&[add, weather]), false),
        // A named function is called once, parallel calls or not.
        (Hermes, &named, true, hermes(&[add, add]), false),
        (Generic, &named, true, format!(r#"{{"tool_calls": [{add}]}}"#), true),
        (Generic, &named, true, format!(r#"{{"tool_calls": [{add}, {add}]}}"#), false),
    ];
    for (format, choice, parallel, text, want) in cases {
        let req = tools_request(choice.clone(), parallel);
        let spec = constrain::spec(format, &req).expect("a constraint");
        assert_eq!(
            accepts(&tok, &vocab, &spec, &text),
            want,
            "{format:?} {choice} {text}"
        );
    }
    // Hermes with auto is free.
    assert!(constrain::spec(Hermes, &tools_request(json!("auto"), true)).is_none());
}
