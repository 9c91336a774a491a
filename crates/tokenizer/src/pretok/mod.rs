//! Pre-tokenizers for byte-level BPE: the regexes that `tokenizer.ggml.pre` names, applied the
//! way llama.cpp's `unicode_regex_split` applies them.
//!
//! Each regex of a list splits every piece the previous one produced; text between matches
//! stays a piece of its own. llama.cpp runs the GPT-2 and Llama-3 patterns through hand-written
//! matchers with its own Unicode tables and the others through `std::regex` over text where each
//! non-ASCII character is collapsed to its category. Both amount to these regexes with `\p{..}`
//! as Unicode general categories and `\s` as White_Space, which is what `fancy-regex` gives.
//! Like llama.cpp, we match the GPT-2 and Llama 3 / Qwen 2 patterns by hand ([`words`]).

mod classes;
mod words;

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

enum Splitter {
    Regex(Regex),
    Gpt2,
    Llama3 { max_digits: usize },
}

impl Splitter {
    fn new(pattern: &str, hand_written: bool) -> Result<Self> {
        Ok(match pattern {
            GPT2 if hand_written => Splitter::Gpt2,
            LLAMA3 if hand_written => Splitter::Llama3 { max_digits: 3 },
            QWEN2 if hand_written => Splitter::Llama3 { max_digits: 1 },
            _ => Splitter::Regex(
                Regex::new(pattern)
                    .map_err(|e| TokenizerError::Regex(format!("{pattern}: {e}")))?,
            ),
        })
    }

    /// Appends the pieces of `text[start..end]` to `out`.
    fn split(
        &self,
        text: &str,
        (start, end): (usize, usize),
        chars: &mut Vec<char>,
        out: &mut Vec<(usize, usize)>,
    ) -> Result<()> {
        let piece = &text[start..end];
        let re = match self {
            Splitter::Regex(re) => re,
            _ => return self.split_by_hand(start, piece, chars, out),
        };
        let mut at = 0;
        for m in re.find_iter(piece) {
            let m = m.map_err(|e| TokenizerError::Regex(e.to_string()))?;
            if m.start() == m.end() {
                continue; // none of our patterns match empty; be safe anyway
            }
            if m.start() > at {
                out.push((start + at, start + m.start()));
            }
            out.push((start + m.start(), start + m.end()));
            at = m.end();
        }
        if at < piece.len() {
            out.push((start + at, end));
        }
        Ok(())
    }

    fn split_by_hand(
        &self,
        start: usize,
        piece: &str,
        chars: &mut Vec<char>,
        out: &mut Vec<(usize, usize)>,
    ) -> Result<()> {
        chars.clear();
        chars.extend(piece.chars());
        let (mut i, mut byte) = (0, start);
        while i < chars.len() {
            let j = match *self {
                Splitter::Gpt2 => words::gpt2(chars, i),
                Splitter::Llama3 { max_digits } => words::llama3(chars, i, max_digits),
                Splitter::Regex(_) => unreachable!(),
            };
            let j = j.max(i + 1); // every alternative consumes a character; never stall
            let len: usize = chars[i..j].iter().map(|c| c.len_utf8()).sum();
            out.push((byte, byte + len));
            (i, byte) = (j, byte + len);
        }
        Ok(())
    }
}

/// A compiled pre-tokenizer.
pub(crate) struct PreTokenizer {
    splitters: Vec<Splitter>,
}

impl PreTokenizer {
    pub fn new(spec: &PreSpec) -> Result<Self> {
        Self::build(spec, true)
    }

    fn build(spec: &PreSpec, hand_written: bool) -> Result<Self> {
        let splitters = spec
            .regexes
            .iter()
            .map(|r| Splitter::new(r, hand_written))
            .collect::<Result<_>>()?;
        Ok(Self { splitters })
    }

    /// Splits `text` into pieces (byte ranges that tile it), in order.
    pub fn split(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let mut pieces = vec![(0, text.len())];
        let mut next = Vec::new();
        let mut chars = Vec::new();
        for s in &self.splitters {
            next.clear();
            for &piece in &pieces {
                s.split(text, piece, &mut chars, &mut next)?;
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests;
