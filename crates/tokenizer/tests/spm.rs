//! The SentencePiece-style tokenizer (`tokenizer.ggml.model = llama`) on a small vocabulary
//! written with `GgufWriter`, with ids worked out by hand from llama.cpp's algorithm:
//!
//! 1. the text gets a leading space (add_space_prefix) and spaces become `▁`;
//! 2. start from single characters; repeatedly merge the adjacent pair whose concatenation is
//!    a token with the highest score (on equal scores, the leftmost pair);
//! 3. a leftover character that is not a token is spelled as its UTF-8 bytes `<0xNN>`.

use ferrolm_gguf::{GgufFile, GgufWriter, Value, ValueType};
use ferrolm_tokenizer::{Tokenizer, TokenizerError};

const UNK: u32 = 0;
const BOS: u32 = 1;
const EOS: u32 = 2;
/// `<0xNN>` is token 3 + NN.
fn byte(b: u8) -> u32 {
    3 + b as u32
}
const FIRST_NORMAL: u32 = 259;

/// Normal tokens and their scores (higher merges first).
const NORMAL: &[(&str, f32)] = &[
    ("▁", -10.0),
    ("h", -10.0),
    ("e", -10.0),
    ("l", -10.0),
    ("o", -10.0),
    ("w", -10.0),
    ("r", -10.0),
    ("d", -10.0),
    ("i", -10.0),
    ("a", -10.0),
    ("b", -10.0),
    ("ll", -1.0),
    ("llo", -1.2),
    ("▁he", -1.5),
    ("▁wor", -1.8),
    ("he", -2.0),
    ("or", -2.5),
    ("▁h", -3.0),
    ("▁w", -3.5),
    ("▁hello", -0.5),
];

fn id(text: &str) -> u32 {
    FIRST_NORMAL + NORMAL.iter().position(|(t, _)| *t == text).unwrap() as u32
}

const TAG: &str = "<tag>"; // user-defined: split out even without parse_special

fn vocab_file(extra: impl FnOnce(&mut GgufWriter)) -> GgufFile {
    let mut tokens: Vec<Value> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types: Vec<Value> = vec![2i32.into(), 3i32.into(), 3i32.into()];
    let mut scores: Vec<Value> = vec![0f32.into(); 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>").into());
        types.push(6i32.into());
        scores.push(0f32.into());
    }
    for (t, s) in NORMAL {
        tokens.push((*t).into());
        types.push(1i32.into());
        scores.push((*s).into());
    }
    tokens.push(TAG.into());
    types.push(4i32.into());
    scores.push(0f32.into());

    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set("tokenizer.ggml.model", "llama");
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(ValueType::F32, scores),
    );
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array(ValueType::I32, types),
    );
    w.set("tokenizer.ggml.bos_token_id", BOS);
    w.set("tokenizer.ggml.eos_token_id", EOS);
    w.set("tokenizer.ggml.unknown_token_id", UNK);
    extra(&mut w);
    let bytes = w.start(Vec::new()).unwrap().finish().unwrap();
    GgufFile::from_vec("spm-test.gguf", bytes).unwrap()
}

fn tok() -> Tokenizer {
    Tokenizer::from_gguf(&vocab_file(|_| {})).unwrap()
}

#[test]
fn merges_follow_scores() {
    // ▁hello▁world: ll(-1) → llo(-1.2) → he(-2) → ▁he(-1.5) → ▁hello(-0.5) → or(-2.5)
    // → ▁w(-3.5) → ▁wor(-1.8); `l` and `d` stay single.
    let t = tok();
    assert_eq!(
        t.encode("hello world", false, false).unwrap(),
        [id("▁hello"), id("▁wor"), id("l"), id("d")]
    );
    // BOS by default (llama family), no EOS.
    assert_eq!(
        t.encode("hello world", true, false).unwrap(),
        [BOS, id("▁hello"), id("▁wor"), id("l"), id("d")]
    );
}

#[test]
fn equal_scores_merge_leftmost_first() {
    // ▁lll: both `ll` pairs score -1; the left one wins and `lll` is no token.
    assert_eq!(
        tok().encode("lll", false, false).unwrap(),
        [id("▁"), id("ll"), id("l")]
    );
}

#[test]
fn unknown_characters_fall_back_to_bytes() {
    // `!` and `é` (C3 A9) are no tokens.
    assert_eq!(
        tok().encode("hi!é", false, false).unwrap(),
        [id("▁h"), id("i"), byte(b'!'), byte(0xC3), byte(0xA9)]
    );
}

#[test]
fn special_tokens_and_space_prefix() {
    let t = tok();
    // Parsed `<s>`, then the text after it gets its own leading space.
    assert_eq!(
        t.encode("<s>hi", false, true).unwrap(),
        [BOS, id("▁h"), id("i")]
    );
    // Not parsed: `<s>` is spelled out (`<`, `s`, `>` are no tokens, so bytes).
    assert_eq!(
        t.encode("<s>", false, false).unwrap(),
        [id("▁"), byte(b'<'), byte(b's'), byte(b'>')]
    );
    // User-defined tokens are always split out.
    assert_eq!(
        t.encode("a<tag>b", false, false).unwrap(),
        [
            id("▁"),
            id("a"),
            FIRST_NORMAL + NORMAL.len() as u32,
            id("▁"),
            id("b")
        ]
    );
}

#[test]
fn add_space_prefix_false_is_honoured() {
    let t = Tokenizer::from_gguf(&vocab_file(|w| {
        w.set("tokenizer.ggml.add_space_prefix", false);
        w.set("tokenizer.ggml.add_bos_token", false);
        w.set("tokenizer.ggml.add_eos_token", true);
    }))
    .unwrap();
    // hello: ll → llo → he; `hello` is no token.
    assert_eq!(
        t.encode("hello", true, false).unwrap(),
        [id("he"), id("llo"), EOS]
    );
}

#[test]
fn decode_restores_text_and_hides_control_tokens() {
    let t = tok();
    for text in ["hello world", "hi!é", "lll", " two  spaces "] {
        let ids = t.encode(text, true, false).unwrap();
        assert_eq!(ids[0], BOS);
        assert_eq!(t.decode(&ids).unwrap(), text);
    }
    assert_eq!(
        t.decode_with(&[BOS, id("▁h"), EOS], true).unwrap(),
        "<s> h</s>"
    );
    // Streaming: the two bytes of é come out together.
    let mut d = t.stream_decoder();
    assert_eq!(d.push(byte(0xC3)).unwrap(), "");
    assert_eq!(d.push(byte(0xA9)).unwrap(), "é");
    // A lone continuation byte can never become text.
    assert_eq!(d.push(byte(0xA9)).unwrap(), "\u{FFFD}");
    assert_eq!(d.push(byte(0xE2)).unwrap(), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}

#[test]
fn missing_byte_token_is_an_error() {
    // Without the byte tokens `!` cannot be spelled.
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", "llama");
    let tokens = ["<unk>", "<s>", "</s>", "▁", "a"].map(Value::from).to_vec();
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    let f = GgufFile::from_vec("t", w.start(Vec::new()).unwrap().finish().unwrap()).unwrap();
    let t = Tokenizer::from_gguf(&f).unwrap();
    assert_eq!(t.encode("a", false, false).unwrap(), [3, 4]);
    let err = t.encode("a!", false, false).unwrap_err();
    assert!(matches!(err, TokenizerError::NoByteToken(0x21)), "{err}");
    assert!(err.to_string().contains("<0x21>"), "{err}");
}

/// A vocabulary trained by SentencePiece itself (`fixtures/gen_spm_fixtures.py`), and the ids
/// SentencePiece gives for sample texts: the reference llama.cpp's SPM tokenizer follows.
#[test]
fn matches_sentencepiece() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/spm/sentencepiece.json"
    );
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let array = |key: &str, ty: ValueType, f: &dyn Fn(&serde_json::Value) -> Value| {
        Value::Array(ty, data[key].as_array().unwrap().iter().map(f).collect())
    };
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", "llama");
    w.set(
        "tokenizer.ggml.tokens",
        array("tokens", ValueType::String, &|v| v.as_str().unwrap().into()),
    );
    w.set(
        "tokenizer.ggml.scores",
        array("scores", ValueType::F32, &|v| {
            (v.as_f64().unwrap() as f32).into()
        }),
    );
    w.set(
        "tokenizer.ggml.token_type",
        array("token_type", ValueType::I32, &|v| {
            (v.as_i64().unwrap() as i32).into()
        }),
    );
    let f = GgufFile::from_vec("sp.gguf", w.start(Vec::new()).unwrap().finish().unwrap()).unwrap();
    let t = Tokenizer::from_gguf(&f).unwrap();
    let cases = data["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(t.encode(text, false, false).unwrap(), want, "{text:?}");
        assert_eq!(t.decode(&want).unwrap(), text);
    }
}
