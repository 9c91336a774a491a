//! Pre-tokenizers for byte-level BPE: the regexes that `tokenizer.ggml.pre` names, applied the
//! way llama.cpp's `unicode_regex_split` applies them.
//!
//! Each regex of a list splits every piece the previous one produced; text between matches
//! stays a piece of its own. llama.cpp runs the GPT-2 and Llama-3 patterns through hand-written
//! matchers with its own Unicode tables and the others through `std::regex` over text where each
//! non-ASCII character is collapsed to its category. Both amount to these regexes with `\p{..}`
//! as Unicode general categories and `\s` as White_Space, which is what `fancy-regex` gives.

use crate::error::{Result, TokenizerError};
use fancy_regex::Regex;

// The GPT-2 pattern. llama.cpp's matcher for it also takes a lone whitespace character (`\s+`),
// which the plain regex leaves between matches; either way it becomes a piece of one character.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
// Llama 3 with the case-insensitive contractions spelled out (as llama.cpp does, so that `(?i)`
// Unicode case folding cannot match `ſ` or `K` there).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
// GPT-4o style: an upper-case run then lower case, where llama.cpp (whose category tables have
// no letter case) counts every letter outside ASCII as both.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
const DEEPSEEK3_MAIN: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// One `tokenizer.ggml.pre` family: the names that select it, its regexes, and the flags
/// llama.cpp sets for it.
pub(crate) struct PreSpec {
    pub names: &'static [&'static str],
    pub regexes: &'static [&'static str],
    /// A whole pre-token that is itself a vocabulary entry skips the merges (Llama 3).
    pub ignore_merges: bool,
    /// BOS is added by default (before `tokenizer.ggml.add_bos_token` overrides it).
    pub add_bos: bool,
    /// The family has no BOS token (ChatGLM).
    pub no_bos: bool,
}

const fn spec(names: &'static [&'static str], regexes: &'static [&'static str]) -> PreSpec {
    PreSpec {
        names,
        regexes,
        ignore_merges: false,
        add_bos: false,
        no_bos: false,
    }
}

pub(crate) const PRE_SPECS: &[PreSpec] = &[
    // Also used when the file names no pre-tokenizer.
    spec(
        &["default"],
        &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    ),
    // `gpt2` is not a llama.cpp name (it says `gpt-2`); accepted as an alias.
    spec(
        &[
            "gpt-2",
            "gpt2",
            "phi-2",
            "gigachat",
            "a.x-4.0",
            "mellum",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        &[GPT2],
    ),
    spec(
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        &[r"\p{N}", GPT2],
    ),
    PreSpec {
        ignore_merges: true,
        add_bos: true,
        ..spec(
            &[
                "llama3",
                "llama-v3",
                "llama-bpe",
                "falcon3",
                "falcon-h1",
                "pixtral",
                "midm-2.0",
                "lfm2",
            ],
            &[LLAMA3],
        )
    },
    spec(&["dbrx", "smaug-bpe"], &[LLAMA3]),
    PreSpec {
        no_bos: true,
        ..spec(&["glm4", "chatglm-bpe"], &[LLAMA3])
    },
    spec(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        &[QWEN2],
    ),
    spec(&["qwen35"], &[QWEN35]),
    spec(
        &["falcon"],
        &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
    ),
    spec(
        &["deepseek-coder"],
        &[
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            "[一-龥ࠀ-一가-퟿]+",
            r"\p{N}",
        ],
    ),
    spec(
        &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        &[r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3_MAIN],
    ),
    spec(
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        &[GPT4O],
    ),
    PreSpec {
        ignore_merges: true,
        add_bos: true,
        ..spec(&["tekken"], &[TEKKEN])
    },
    spec(&["poro-chat", "bloom", "gpt3-finnish"], &[PORO]),
    spec(&["viking"], &[PORO, r"\p{N}"]),
];

pub(crate) fn find(name: &str) -> Option<&'static PreSpec> {
    PRE_SPECS.iter().find(|s| s.names.contains(&name))
}

pub(crate) fn supported_names() -> String {
    let names: Vec<&str> = PRE_SPECS
        .iter()
        .flat_map(|s| s.names.iter().copied())
        .collect();
    names.join(", ")
}

/// A compiled pre-tokenizer.
pub(crate) struct PreTokenizer {
    regexes: Vec<Regex>,
}

impl PreTokenizer {
    pub fn new(spec: &PreSpec) -> Result<Self> {
        let regexes = spec
            .regexes
            .iter()
            .map(|r| Regex::new(r).map_err(|e| TokenizerError::Regex(format!("{r}: {e}"))))
            .collect::<Result<_>>()?;
        Ok(Self { regexes })
    }

    /// Splits `text` into pieces (byte ranges that tile it), in order.
    pub fn split(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let mut pieces = vec![(0, text.len())];
        let mut next = Vec::new();
        for re in &self.regexes {
            next.clear();
            for &(start, end) in &pieces {
                let piece = &text[start..end];
                let mut at = 0;
                for m in re.find_iter(piece) {
                    let m = m.map_err(|e| TokenizerError::Regex(e.to_string()))?;
                    if m.start() == m.end() {
                        continue; // none of our patterns match empty; be safe anyway
                    }
                    if m.start() > at {
                        next.push((start + at, start + m.start()));
                    }
                    next.push((start + m.start(), start + m.end()));
                    at = m.end();
                }
                if at < piece.len() {
                    next.push((start + at, end));
                }
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn qwen2_splits_single_digits() {
        assert_eq!(split("qwen2", "ab 123"), ["ab", " ", "1", "2", "3"]);
    }
}
