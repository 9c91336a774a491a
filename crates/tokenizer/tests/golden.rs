//! SmolLM2 (byte-level BPE, pre-tokenizer `smollm`) against llama.cpp's own tokenization.

mod common;

use ferrolm_tokenizer::Tokenizer;
use serde_json::Value;
use std::time::Instant;

struct Case {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The golden's `tokenize` cases, plus its `generate` prompts (tokenized with special tokens
/// added and parsed, as llama-cpp-python does for a prompt).
fn golden_cases() -> Vec<Case> {
    let path = common::golden_dir().join("smollm2-135m-instruct-q4_1.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let g: Value = serde_json::from_str(&text).unwrap();
    let mut cases: Vec<Case> = g["tokenize"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_owned(),
            add_special: c["add_special"].as_bool().unwrap(),
            parse_special: c["parse_special"].as_bool().unwrap(),
            ids: ids(&c["ids"]),
        })
        .collect();
    cases.extend(g["generate"].as_array().unwrap().iter().map(|c| Case {
        text: c["text"].as_str().unwrap().to_owned(),
        add_special: true,
        parse_special: true,
        ids: ids(&c["prompt_ids"]),
    }));
    assert!(cases.len() >= 45, "golden has {} cases", cases.len());
    cases
}

fn tokenizer(test: &str) -> Option<Tokenizer> {
    let f = common::require_model(test)?;
    Some(Tokenizer::from_gguf(&f).unwrap())
}

#[test]
fn every_golden_case_matches_llama_cpp() {
    let Some(tok) = tokenizer("every_golden_case_matches_llama_cpp") else {
        return;
    };
    let mut failures = Vec::new();
    for c in golden_cases() {
        let got = tok.encode(&c.text, c.add_special, c.parse_special).unwrap();
        if got != c.ids {
            failures.push(format!(
                "{:?} (add_special={}, parse_special={})\n  llama.cpp: {:?}\n  ours:      {:?}",
                c.text, c.add_special, c.parse_special, c.ids, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn decoding_the_golden_ids_gives_the_text_back() {
    let Some(tok) = tokenizer("decoding_the_golden_ids_gives_the_text_back") else {
        return;
    };
    let mut plain = 0;
    for c in golden_cases() {
        // Rendering control tokens as text always restores the input (SmolLM2 adds no BOS).
        assert_eq!(
            tok.decode_with(&c.ids, true).unwrap(),
            c.text,
            "{:?}",
            c.ids
        );
        if c.ids.iter().any(|&id| tok.is_control(id)) {
            continue;
        }
        plain += 1;
        let ours = tok.encode(&c.text, c.add_special, c.parse_special).unwrap();
        assert_eq!(tok.decode(&ours).unwrap(), c.text);
    }
    assert!(plain >= 40, "only {plain} cases without special tokens");
}

#[test]
fn streaming_decode_holds_back_split_characters() {
    let Some(tok) = tokenizer("streaming_decode_holds_back_split_characters") else {
        return;
    };
    for text in [
        "emoji 🚀🔥 and 👩\u{200d}💻",
        "日本語のテキストです",
        "naïve café — 🌳",
    ] {
        let ids = tok.encode(text, false, false).unwrap();
        let mut dec = tok.stream_decoder();
        let mut out = String::new();
        let mut held_back = 0;
        for &id in &ids {
            let chunk = dec.push(id).unwrap();
            assert!(
                !chunk.contains('\u{FFFD}'),
                "{text:?}: broken UTF-8 in {chunk:?}"
            );
            if chunk.is_empty() {
                held_back += 1;
            }
            out.push_str(&chunk);
        }
        assert_eq!(dec.finish(), "");
        assert_eq!(out, text);
        // These texts have characters spread over several byte tokens (see the golden ids).
        assert!(held_back > 0, "{text:?}: no token ended inside a character");
    }
}

#[test]
fn smollm2_special_tokens_follow_llama_cpp_rules() {
    let Some(tok) = tokenizer("smollm2_special_tokens_follow_llama_cpp_rules") else {
        return;
    };
    assert_eq!(tok.n_vocab(), 49152);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(!tok.add_bos() && !tok.add_eos());
    assert_eq!(tok.token_text(2), Some("<|im_end|>"));
    // llama.cpp's rules: <|endoftext|> (0) and <|im_end|> (2) end generation by their text,
    // and <reponame> (4) does as the detected FIM repo token; <|im_start|> (1) does not.
    assert_eq!(tok.eog_ids().collect::<Vec<_>>(), [0, 2, 4]);
    assert!(tok.is_eog(2) && tok.is_eog(0) && !tok.is_eog(1));
    assert_eq!(tok.special_tokens().fim_rep, Some(4));
    assert_eq!(tok.eot(), Some(2));
    // Control tokens render only when asked.
    assert_eq!(tok.decode(&[1, 19556, 2]).unwrap(), "Hello");
    assert_eq!(
        tok.decode_with(&[1, 19556, 2], true).unwrap(),
        "<|im_start|>Hello<|im_end|>"
    );
}

#[test]
fn ten_kilobytes_tokenize_in_milliseconds() {
    let Some(tok) = tokenizer("ten_kilobytes_tokenize_in_milliseconds") else {
        return;
    };
    let mut text = String::new();
    for c in golden_cases().iter().cycle() {
        if text.len() >= 10 * 1024 {
            break;
        }
        text.push_str(&c.text);
        text.push(' ');
    }
    let _warm = tok.encode(&text, true, true).unwrap();
    let start = Instant::now();
    let ids = tok.encode(&text, true, true).unwrap();
    let took = start.elapsed();
    eprintln!("{} bytes -> {} tokens in {took:?}", text.len(), ids.len());
    assert_eq!(tok.decode_with(&ids, true).unwrap(), text);
    // Generous for a shared 2-core machine; typically a few milliseconds.
    assert!(took.as_millis() < 250, "took {took:?}");
}
