//! Pre-tokenizer splits against Hugging Face `tokenizers` and against the regexes.
use super::*;

#[test]
fn every_supported_pattern_compiles() {
    for s in PRE_SPECS {
        PreTokenizer::new(s).unwrap_or_else(|e| panic!("{:?}: {e}", s.names));
    }
}

fn split<'t>(pre: &str, text: &'t str) -> Vec<&'t str> {
    let p = PreTokenizer::new(find(pre).unwrap()).unwrap();
    p.split(text)
        .unwrap()
        .into_iter()
        .map(|(a, b)| &text[a..b])
        .collect()
}

// Expected splits are those of the Hugging Face `tokenizers` pre-tokenizers for these
// families (the regexes are theirs), worked through by hand.
#[test]
fn gpt2_keeps_one_space_before_words() {
    assert_eq!(
        split("gpt-2", "Hello  world's 42!!\n\n x"),
        ["Hello", " ", " world", "'s", " 42", "!!", "\n\n", " x"]
    );
}

#[test]
fn smollm_splits_digits_first() {
    assert_eq!(split("smollm", "a 123"), ["a", " ", "1", "2", "3"]);
}

#[test]
fn llama3_groups_three_digits_and_newlines() {
    assert_eq!(
        split("llama-bpe", "x 12345 I'M\n\n  y"),
        ["x", " ", "123", "45", " I", "'M", "\n\n", " ", " y"]
    );
}

/// Hugging Face `tokenizers` with the families' original regexes, from
/// `tests/fixtures/gen_pretok_fixtures.py`.
#[test]
fn splits_match_hugging_face_tokenizers() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pretok/cases.json"
    );
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut failures = Vec::new();
    for c in cases.as_array().unwrap() {
        let (pre, text) = (c["pre"].as_str().unwrap(), c["text"].as_str().unwrap());
        let want: Vec<&str> = c["pieces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        let got = split(pre, text);
        if got != want {
            failures.push(format!("{pre} {text:?}\n  hf:   {want:?}\n  ours: {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The hand-written matchers agree with the regexes they stand for, on the fixture texts
/// and on random strings over characters where the alternatives compete.
#[test]
fn hand_written_matchers_equal_their_regexes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pretok/cases.json"
    );
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut texts: Vec<String> = cases
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_owned())
        .collect();
    let alphabet: Vec<char> = " \t\r\n\u{a0}\u{3000}'sStTrReEvVlLmMdDaé日1٣½!.,-_\u{301}🚀\u{1c}"
        .chars()
        .collect();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..3000 {
        let len = (seed % 24) as usize;
        texts.push(
            (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect(),
        );
    }
    for pre in ["gpt-2", "llama-bpe", "qwen2"] {
        let spec = find(pre).unwrap();
        let (fast, slow) = (
            PreTokenizer::build(spec, true).unwrap(),
            PreTokenizer::build(spec, false).unwrap(),
        );
        assert!(matches!(
            fast.splitters[0],
            Splitter::Gpt2 | Splitter::Llama3 { .. }
        ));
        for t in &texts {
            assert_eq!(
                fast.split(t).unwrap(),
                slow.split(t).unwrap(),
                "{pre} {t:?}"
            );
        }
    }
}

#[test]
fn megabyte_whitespace_runs_split_without_a_stack() {
    let p = PreTokenizer::new(find("gpt-2").unwrap()).unwrap();
    let text = format!("{}x", " ".repeat(2_000_000));
    assert_eq!(
        p.split(&text).unwrap(),
        [(0, 1_999_999), (1_999_999, 2_000_001)]
    );
}

#[test]
fn qwen2_splits_single_digits() {
    assert_eq!(split("qwen2", "ab 123"), ["ab", " ", "1", "2", "3"]);
}
