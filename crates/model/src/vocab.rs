//! A small synthetic byte-level BPE vocabulary (GPT-2 style), so synthetic models can be
//! tokenized and detokenized like real ones.
//!
//! Token 0 is `<|endoftext|>` (BOS and EOS, as in SmolLM2), then the 256 byte tokens, then
//! merges learned from a short built-in text, then filler tokens up to the size the model's
//! embedding asks for. The fillers are normal tokens that decode to text of their own (` ~7`,
//! ` ~8`, ...): a random model picks them most of the time, and a token that decodes to
//! nothing would leave a streamed reply without chunks until its end.

use crate::error::{ModelError, Result};
use ferrolm_gguf::{GgufWriter, Value, ValueType};
use std::collections::{BTreeMap, HashSet};

/// llama.cpp's token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;

/// Enough merges to make common words single tokens; the rest of the vocab is filler.
const MAX_MERGES: usize = 400;

const CORPUS: &str = "the quick brown fox jumps over the lazy dog. a model reads the text \
    one token at a time and writes the next token. the weights of this model are random, \
    so what it writes is noise, but the shapes and the vocabulary are those of a real \
    model: the tokenizer splits words into the pieces it has learned, and falls back to \
    single bytes for anything else. in the beginning there was the word, and the word \
    was split into tokens. they say that there is nothing new under the sun; we think \
    that there is always something to learn when you read and write with care. \
    The Rust compiler checks what we write before it runs, and the tests check the rest.";

/// GPT-2's reversible map from bytes to printable characters.
fn byte_chars() -> [char; 256] {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut out = ['\0'; 256];
    let mut next = 256;
    for b in 0..256u32 {
        out[b as usize] = if printable(b) {
            char::from_u32(b).expect("latin-1")
        } else {
            next += 1;
            char::from_u32(next - 1).expect("below the surrogates")
        };
    }
    out
}

/// Learns up to `max` merges from [`CORPUS`]: (left, right) pairs in rank order.
fn learn_merges(max: usize) -> Vec<(String, String)> {
    let map = byte_chars();
    let mut words: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for (i, w) in CORPUS.split_whitespace().enumerate() {
        let text = if i == 0 {
            w.to_owned()
        } else {
            format!(" {w}")
        };
        let symbols = text.bytes().map(|b| map[b as usize].to_string()).collect();
        *words.entry(symbols).or_default() += 1;
    }
    let mut merges = Vec::new();
    while merges.len() < max {
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (w, n) in &words {
            for p in w.windows(2) {
                *counts.entry((&p[0], &p[1])).or_default() += n;
            }
        }
        // Most frequent first; ties go to the smallest pair, so the result is deterministic.
        let best =
            counts.into_iter().fold(
                None,
                |best: Option<((&str, &str), usize)>, (p, n)| match best {
                    Some((_, m)) if m >= n => best,
                    _ => Some((p, n)),
                },
            );
        let Some(((a, b), n)) = best else { break };
        if n < 2 {
            break;
        }
        let (a, b) = (a.to_owned(), b.to_owned());
        words = words
            .into_iter()
            .map(|(w, n)| (merge_pair(&w, &a, &b), n))
            .collect();
        merges.push((a, b));
    }
    merges
}

fn merge_pair(word: &[String], a: &str, b: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(word.len());
    let mut i = 0;
    while i < word.len() {
        if i + 1 < word.len() && word[i] == a && word[i + 1] == b {
            out.push(format!("{a}{b}"));
            i += 2;
        } else {
            out.push(word[i].clone());
            i += 1;
        }
    }
    out
}

/// (tokens, token types, merges) for a vocabulary of exactly `n_vocab` tokens.
pub(crate) fn build_bpe(n_vocab: usize) -> Result<(Vec<String>, Vec<i32>, Vec<String>)> {
    let base = 1 + 256;
    if n_vocab < base {
        return Err(ModelError::Invalid(format!(
            "vocab size {n_vocab} is too small for a byte-level BPE vocabulary (needs {base})"
        )));
    }
    let mut tokens = vec!["<|endoftext|>".to_owned()];
    let mut types = vec![CONTROL];
    tokens.extend(byte_chars().iter().map(|c| c.to_string()));
    types.extend([NORMAL; 256]);
    let mut merges = Vec::new();
    let mut seen: HashSet<String> = tokens.iter().cloned().collect();
    for (a, b) in learn_merges(MAX_MERGES.min(n_vocab - base)) {
        let joined = format!("{a}{b}");
        merges.push(format!("{a} {b}"));
        if seen.insert(joined.clone()) {
            tokens.push(joined);
            types.push(NORMAL);
        }
    }
    // `Ġ` is the byte map's space; no learned merge holds a `~`, so these never collide.
    for i in 0..n_vocab - tokens.len() {
        tokens.push(format!("Ġ~{i}"));
        types.push(NORMAL);
    }
    Ok((tokens, types, merges))
}

/// Writes the `tokenizer.ggml.*` keys of the synthetic vocabulary.
pub(crate) fn write_bpe(w: &mut GgufWriter, n_vocab: usize) -> Result<()> {
    let (tokens, types, merges) = build_bpe(n_vocab)?;
    let strings = |v: Vec<String>| {
        Value::Array(
            ValueType::String,
            v.into_iter().map(Value::String).collect(),
        )
    };
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", "default");
    w.set("tokenizer.ggml.tokens", strings(tokens));
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array(ValueType::I32, types.into_iter().map(Value::I32).collect()),
    );
    w.set("tokenizer.ggml.merges", strings(merges));
    w.set("tokenizer.ggml.bos_token_id", 0u32);
    w.set("tokenizer.ggml.eos_token_id", 0u32);
    w.set("tokenizer.ggml.add_bos_token", false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocab_is_consistent_and_exactly_sized() {
        let (tokens, types, merges) = build_bpe(512).unwrap();
        assert_eq!(tokens.len(), 512);
        assert_eq!(types.len(), 512);
        let set: HashSet<&str> = tokens.iter().map(String::as_str).collect();
        assert_eq!(set.len(), 512, "tokens are unique");
        assert!(merges.len() > 50, "{} merges", merges.len());
        for m in &merges {
            let (a, b) = m.split_once(' ').unwrap();
            assert!(set.contains(a) && set.contains(b), "{m}");
            assert!(set.contains(format!("{a}{b}").as_str()), "{m}");
        }
        assert!(set.contains("Ġthe"), "common words become one token");
        // Fillers are normal tokens with text of their own (a streamed reply gets chunks).
        assert!(tokens[511].starts_with("Ġ~"), "{}", tokens[511]);
        assert!(types[1..].iter().all(|&t| t == NORMAL));
        assert!(build_bpe(256).is_err());
        // Just the bytes: no room for merges, no filler.
        assert_eq!(build_bpe(257).unwrap().2.len(), 0);
    }

    #[test]
    fn byte_map_is_a_bijection_onto_printables() {
        let m = byte_chars();
        let set: HashSet<char> = m.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'a' as usize], 'a');
        assert!(m.iter().all(|c| !c.is_whitespace() && !c.is_control()));
    }
}
