//! Chat templates rendered by MiniJinja against Hugging Face's Jinja2 rendering, which
//! `fixtures/gen_chat_fixtures.py` produced into `fixtures/chat/cases.json`: plain
//! conversations, and tools with calls and results (Qwen3's template natively, SmolLM2's in
//! the generic format).

mod common;

use ferrolm_tokenizer::chat::ToolPrompt;
use ferrolm_tokenizer::chat::CHATML_TEMPLATE;
use ferrolm_tokenizer::{ChatTemplate, Message, Tokenizer};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

fn read(name: &str) -> String {
    let p = fixtures().join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn messages(v: &Value) -> Vec<Message> {
    let text = |m: &Value, k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| Message {
            tool_calls: m.get("tool_calls").and_then(Value::as_array).cloned(),
            tool_call_id: text(m, "tool_call_id"),
            name: text(m, "name"),
            ..Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap())
        })
        .collect()
}

/// The case's tools, when it has any.
fn tools(c: &Value) -> Option<ToolPrompt> {
    Some(ToolPrompt {
        tools: c.get("tools")?.as_array()?.clone(),
        parallel: c["parallel_tool_calls"].as_bool().unwrap_or(false),
    })
}

fn cases() -> Vec<Value> {
    let cases: Value = serde_json::from_str(&read("cases.json")).unwrap();
    cases.as_array().unwrap().clone()
}

#[test]
fn templates_render_as_hugging_face_does() {
    let cases = cases();
    assert!(cases.len() >= 17);
    for c in cases {
        let name = c["template"].as_str().unwrap();
        let agp = c["add_generation_prompt"].as_bool().unwrap();
        let t = ChatTemplate::new(
            &read(name),
            c["bos_token"].as_str().unwrap(),
            c["eos_token"].as_str().unwrap(),
        )
        .unwrap();
        let got = t.render_with_tools(&messages(&c["messages"]), tools(&c).as_ref(), agp);
        match (&c["expected"], &c["error"]) {
            (Value::String(want), _) => {
                assert_eq!(got.unwrap(), *want, "{name}, add_generation_prompt={agp}")
            }
            (_, Value::String(want)) => {
                let err = got.unwrap_err().to_string();
                assert!(
                    err.contains(want.as_str()),
                    "{name}: {err:?} lacks {want:?}"
                );
            }
            _ => panic!("case without expected or error"),
        }
    }
}

#[test]
fn fallback_is_the_chatml_fixture() {
    assert_eq!(CHATML_TEMPLATE, read("chatml.jinja"));
    assert_eq!(ChatTemplate::chatml().source(), CHATML_TEMPLATE);
}

#[test]
fn smollm2_template_from_the_model() {
    let Some(f) = common::require_model("smollm2_template_from_the_model") else {
        return;
    };
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let t = ChatTemplate::from_gguf(&f, &tok).unwrap();
    assert_eq!(t.source(), read("smollm2.jinja"));
    let mut checked = 0;
    for c in cases() {
        if c["template"] != "smollm2.jinja" || c.get("tools").is_some() {
            continue;
        }
        assert_eq!(c["bos_token"], tok.token_text(tok.bos().unwrap()).unwrap());
        assert_eq!(c["eos_token"], tok.token_text(tok.eos().unwrap()).unwrap());
        let agp = c["add_generation_prompt"].as_bool().unwrap();
        let got = t.render(&messages(&c["messages"]), agp).unwrap();
        assert_eq!(got, c["expected"].as_str().unwrap());
        // The rendered prompt tokenizes with the chat markers as single control tokens.
        let ids = tok.encode(&got, true, true).unwrap();
        assert_eq!(ids[0], tok.token_id("<|im_start|>").unwrap());
        assert_eq!(tok.decode_with(&ids, true).unwrap(), got);
        checked += 1;
    }
    assert_eq!(checked, 4);
}

#[test]
fn a_model_without_template_gets_chatml() {
    let f = ferrolm_gguf::GgufFile::open(common::golden_dir().join("tiny-llama-f32.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let t = ChatTemplate::from_gguf(&f, &tok).unwrap();
    assert_eq!(t.source(), CHATML_TEMPLATE);
    let out = t.render(&[Message::new("user", "Hi")], true).unwrap();
    assert_eq!(
        out,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}
