//! Unsupported or broken tokenizer metadata is refused with an error naming the value, and
//! `no_vocab` models (the golden tiny models) handle ids only.

mod common;

use ferrolm_gguf::{GgufFile, GgufWriter, Value, ValueType};
use ferrolm_tokenizer::{Tokenizer, TokenizerError, VocabType};

fn file(model: Option<&str>, pre: Option<&str>) -> GgufFile {
    let mut w = GgufWriter::new();
    if let Some(m) = model {
        w.set("tokenizer.ggml.model", m);
    }
    if let Some(p) = pre {
        w.set("tokenizer.ggml.pre", p);
    }
    let tokens = ["a", "b", "ab"].map(Value::from).to_vec();
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    let merges = vec![Value::from("a b")];
    w.set(
        "tokenizer.ggml.merges",
        Value::Array(ValueType::String, merges),
    );
    GgufFile::from_vec("t.gguf", w.start(Vec::new()).unwrap().finish().unwrap()).unwrap()
}

fn error(f: &GgufFile) -> String {
    match Tokenizer::from_gguf(f) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_model_is_named() {
    let msg = error(&file(Some("wordpiece-9000"), None));
    assert!(
        msg.contains("`wordpiece-9000`") && msg.contains("tokenizer.ggml.model"),
        "{msg}"
    );
}

#[test]
fn unknown_pre_tokenizer_is_named() {
    let msg = error(&file(Some("gpt2"), Some("klingon-bpe")));
    assert!(
        msg.contains("`klingon-bpe`") && msg.contains("tokenizer.ggml.pre"),
        "{msg}"
    );
    assert!(
        msg.contains("smollm") && msg.contains("qwen2"),
        "lists what is supported: {msg}"
    );
}

#[test]
fn missing_model_key_is_named() {
    let msg = error(&file(None, None));
    assert!(msg.contains("tokenizer.ggml.model"), "{msg}");
}

#[test]
fn missing_pre_means_default() {
    // As llama.cpp: a gpt2 vocabulary without `tokenizer.ggml.pre` uses the default regexes.
    let t = Tokenizer::from_gguf(&file(Some("gpt2"), None)).unwrap();
    assert_eq!(t.encode("ab", false, false).unwrap(), [2]);
}

#[test]
fn wrong_metadata_types_are_reported() {
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", "llama");
    let tokens = ["a", "b"].map(Value::from).to_vec();
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(ValueType::F32, vec![0f32.into()]),
    );
    let f = GgufFile::from_vec("t", w.start(Vec::new()).unwrap().finish().unwrap()).unwrap();
    let msg = error(&f);
    assert!(
        msg.contains("tokenizer.ggml.scores") && msg.contains("1 entries for 2"),
        "{msg}"
    );
}

#[test]
fn no_vocab_models_decode_ids_and_refuse_text() {
    let path = common::golden_dir().join("tiny-llama-f32.gguf");
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t = Tokenizer::from_gguf(&f).unwrap();
    assert_eq!(t.vocab_type(), VocabType::None);
    assert_eq!(t.n_vocab(), 512); // llama.vocab_size
    let err = t.encode("hello", true, true).unwrap_err();
    assert!(matches!(err, TokenizerError::NoVocab), "{err}");
    assert!(err.to_string().contains("no_vocab"), "{err}");
    assert_eq!(t.decode(&[5, 511, 0]).unwrap(), "[5][511][0]");
    assert_eq!(t.bos(), None);
    assert!(!t.is_eog(0));
    let err = t.decode(&[512]).unwrap_err();
    assert!(err.to_string().contains("512"), "{err}");
}

#[test]
fn out_of_range_ids_are_errors() {
    let t = Tokenizer::from_gguf(&file(Some("gpt2"), Some("gpt-2"))).unwrap();
    let err = t.decode(&[0, 3]).unwrap_err();
    assert!(
        matches!(err, TokenizerError::BadToken { id: 3, n_vocab: 3 }),
        "{err}"
    );
}
