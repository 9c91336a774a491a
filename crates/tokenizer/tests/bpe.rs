//! Byte-level BPE on a small hand-built vocabulary, for what SmolLM2's golden cannot show:
//! merge ranks, Llama 3's `ignore_merges`, per-family BOS defaults, and llama.cpp's handling of
//! merges whose result is not a token. Expected ids are worked out by hand.

use ferrolm_gguf::{GgufFile, GgufWriter, Value, ValueType};
use ferrolm_tokenizer::{Tokenizer, VocabType};

/// GPT-2's byte → character table, written out independently of the crate.
fn byte_char(b: u8) -> char {
    let printable = |c: u32| (0x21..=0x7E).contains(&c) || (0xA1..=0xAC).contains(&c) || c >= 0xAE;
    if printable(b as u32) {
        return char::from_u32(b as u32).unwrap();
    }
    let shifted = (0..b as u32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + shifted).unwrap()
}

/// Tokens 0..=255 are the bytes; then these.
const EXTRA: &[&str] = &["he", "ll", "hell", "hello", "Ġw", "or", "<|eot_id|>"];
const MERGES: &[&str] = &["l l", "h e", "he ll", "o r", "Ġ w", "w o", "hell o"];

fn id(t: &str) -> u32 {
    256 + EXTRA.iter().position(|e| *e == t).unwrap() as u32
}

fn b(c: char) -> u32 {
    c as u32 // ASCII letters are their own byte tokens
}

fn file(pre: &str, extra_tokens: &[&str], merges: &[&str]) -> GgufFile {
    let mut tokens: Vec<Value> = (0..=255u8)
        .map(|b| byte_char(b).to_string().into())
        .collect();
    tokens.extend(extra_tokens.iter().map(|&t| Value::from(t)));
    let mut types = vec![Value::I32(1); tokens.len()];
    if let Some(i) = extra_tokens.iter().position(|&t| t == "<|eot_id|>") {
        types[256 + i] = Value::I32(3);
    }
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", pre);
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array(ValueType::I32, types),
    );
    let merges = merges.iter().map(|&m| Value::from(m)).collect();
    w.set(
        "tokenizer.ggml.merges",
        Value::Array(ValueType::String, merges),
    );
    w.set("tokenizer.ggml.bos_token_id", 0u32);
    let bytes = w.start(Vec::new()).unwrap().finish().unwrap();
    GgufFile::from_vec(format!("bpe-{pre}.gguf"), bytes).unwrap()
}

fn tok(pre: &str) -> Tokenizer {
    Tokenizer::from_gguf(&file(pre, EXTRA, MERGES)).unwrap()
}

#[test]
fn merges_apply_in_rank_order() {
    let t = tok("gpt-2");
    assert_eq!(t.vocab_type(), VocabType::Bpe);
    // hello: ll (rank 0), he (1), he+ll (2), hell+o (6); `hello` is a token.
    assert_eq!(t.encode("hello", false, false).unwrap(), [id("hello")]);
    // hellor: as above up to `hell`; then `o r` (rank 3) comes before `hell o` (rank 6), so the
    // `o` goes to `or`.
    assert_eq!(
        t.encode("hellor", false, false).unwrap(),
        [id("hell"), id("or")]
    );
    // GPT-2 family: no BOS by default.
    assert!(!t.add_bos());
    assert_eq!(t.encode("he", true, false).unwrap(), [id("he")]);
}

#[test]
fn llama3_takes_whole_words_that_are_tokens() {
    // Without the `hell o` merge, `hello` cannot be built, but `llama-bpe` looks the whole
    // pre-token up first (ignore_merges) and adds BOS by default.
    let merges = &MERGES[..MERGES.len() - 1];
    let t = Tokenizer::from_gguf(&file("llama-bpe", EXTRA, merges)).unwrap();
    assert!(t.add_bos());
    assert_eq!(t.encode("hello", true, false).unwrap(), [0, id("hello")]);
    let g = Tokenizer::from_gguf(&file("gpt-2", EXTRA, merges)).unwrap();
    assert_eq!(
        g.encode("hello", false, false).unwrap(),
        [id("hell"), b('o')]
    );
}

#[test]
fn merge_results_that_are_not_tokens_spell_ascii_bytes_only() {
    // `w o` merges into `wo`, which is no token: llama.cpp then emits the one-byte tokens of
    // the merged text's ASCII characters, here `w` and `o`.
    let t = tok("gpt-2");
    assert_eq!(t.encode("wo", false, false).unwrap(), [b('w'), b('o')]);
    // ` w` → `Ġw` is a token; ` wor` → `Ġw`+`or` (rank 3 `o r` first, then no `Ġw or`).
    assert_eq!(
        t.encode(" wor", false, false).unwrap(),
        [id("Ġw"), id("or")]
    );
    // A merged symbol whose characters are not ASCII loses them: without the token `Ġw`,
    // ` w` merges to a non-token and only `w` survives (llama.cpp's behaviour).
    let no_gw: Vec<&str> = EXTRA.iter().copied().filter(|&t| t != "Ġw").collect();
    let t = Tokenizer::from_gguf(&file("gpt-2", &no_gw, MERGES)).unwrap();
    assert_eq!(t.encode(" w", false, false).unwrap(), [b('w')]);
}

#[test]
fn control_tokens_are_parsed_only_when_asked() {
    let t = tok("gpt-2");
    let eot = id("<|eot_id|>");
    assert_eq!(
        t.encode("he<|eot_id|>", false, true).unwrap(),
        [id("he"), eot]
    );
    let spelled = t.encode("<|eot_id|>", false, false).unwrap();
    assert!(spelled.len() > 1 && !spelled.contains(&eot));
    assert!(t.is_eog(eot) && t.eot() == Some(eot));
    assert_eq!(t.decode(&[id("he"), eot]).unwrap(), "he");
    assert_eq!(
        t.decode_with(&[id("he"), eot], true).unwrap(),
        "he<|eot_id|>"
    );
}
