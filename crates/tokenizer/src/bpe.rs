//! Byte-level BPE (GPT-2 style): bytes map to printable characters, then ranked merges.

use crate::error::{Result, TokenizerError};
use crate::pretok::{PreSpec, PreTokenizer};
use crate::vocab::Vocab;
use ferrolm_gguf::GgufFile;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::OnceLock;

/// GPT-2's byte → character table: printable Latin-1 bytes stand for themselves, the others
/// are shifted to U+0100 and up in byte order.
pub(crate) fn byte_to_char() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut n = 0;
        for b in 0..256u32 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            t[b as usize] = if printable {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap()
            };
        }
        t
    })
}

/// The inverse of [`byte_to_char`].
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static TABLE: OnceLock<HashMap<char, u8>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let t = byte_to_char();
            (0..=255u8).map(|b| (t[b as usize], b)).collect()
        })
        .get(&c)
        .copied()
}

/// Marks a symbol that is neither a token nor part of any merge.
const NO_SYMBOL: u32 = u32::MAX;

pub(crate) struct Bpe {
    pre: PreTokenizer,
    ignore_merges: bool,
    n_vocab: u32,
    /// (left symbol, right symbol) → (rank, merged symbol). Symbols below `n_vocab` are token
    /// ids; merge results that are not tokens get ids from `n_vocab` up.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The symbol of each byte's character.
    byte_symbol: [u32; 256],
    /// What llama.cpp emits for a byte of a merged symbol that is not a token: the token whose
    /// text is that byte's one-byte character, if it is ASCII and exists.
    byte_fallback: [Option<u32>; 256],
}

struct Sym {
    id: u32,
    start: usize,
    end: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

impl Bpe {
    pub fn new(f: &GgufFile, vocab: &Vocab, spec: &PreSpec) -> Result<Self> {
        let n_vocab = vocab.tokens.len() as u32;
        let key = "tokenizer.ggml.merges";
        let merges_text = f.get_str_array(key)?;
        let mut extra: HashMap<String, u32> = HashMap::new();
        let mut symbol = |s: &str| -> u32 {
            if let Some(id) = vocab.id(s) {
                return id;
            }
            let next = n_vocab + extra.len() as u32;
            *extra.entry(s.to_owned()).or_insert(next)
        };
        let mut merges = HashMap::with_capacity(merges_text.len());
        for (rank, m) in merges_text.iter().enumerate() {
            // Split at the first space after the first character, as llama.cpp does (a merge
            // of a space token, if any, is written with the space first).
            let pos = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i);
            let Some(pos) = pos else {
                return Err(TokenizerError::Metadata {
                    key: key.into(),
                    what: format!("merge {rank} ({m:?}) has no space"),
                });
            };
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            let ab = format!("{a}{b}");
            let pair = (symbol(a), symbol(b));
            let merged = symbol(&ab);
            // The first (lowest-rank) entry wins if a pair is listed twice.
            merges.entry(pair).or_insert((rank as u32, merged));
        }
        let table = byte_to_char();
        let mut byte_symbol = [NO_SYMBOL; 256];
        let mut byte_fallback = [None; 256];
        let mut buf = [0u8; 4];
        for b in 0..256 {
            let s: &str = table[b].encode_utf8(&mut buf);
            byte_symbol[b] = vocab
                .id(s)
                .or_else(|| extra.get(s).copied())
                .unwrap_or(NO_SYMBOL);
            if s.len() == 1 {
                byte_fallback[b] = vocab.id(s);
            }
        }
        Ok(Self {
            pre: PreTokenizer::new(spec)?,
            ignore_merges: spec.ignore_merges,
            n_vocab,
            merges,
            byte_symbol,
            byte_fallback,
        })
    }

    /// Appends the tokens of one raw-text fragment.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut syms = Vec::new();
        let mut heap = BinaryHeap::new();
        for (start, end) in self.pre.split(text)? {
            self.encode_word(
                vocab,
                &text.as_bytes()[start..end],
                &mut syms,
                &mut heap,
                out,
            );
        }
        Ok(())
    }

    fn encode_word(
        &self,
        vocab: &Vocab,
        word: &[u8],
        syms: &mut Vec<Sym>,
        heap: &mut BinaryHeap<Reverse<(u32, usize, u32, u32)>>,
        out: &mut Vec<u32>,
    ) {
        if self.ignore_merges {
            let encoded: String = word.iter().map(|&b| byte_to_char()[b as usize]).collect();
            if let Some(id) = vocab.id(&encoded) {
                out.push(id);
                return;
            }
        }
        syms.clear();
        heap.clear();
        for (i, &b) in word.iter().enumerate() {
            syms.push(Sym {
                id: self.byte_symbol[b as usize],
                start: i,
                end: i + 1,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == word.len() { NONE } else { i + 1 },
            });
        }
        let push = |syms: &[Sym], heap: &mut BinaryHeap<_>, l: usize| {
            if l == NONE || syms[l].next == NONE {
                return;
            }
            let r = syms[l].next;
            if let Some(&(rank, _)) = self.merges.get(&(syms[l].id, syms[r].id)) {
                heap.push(Reverse((rank, l, syms[l].id, syms[r].id)));
            }
        };
        for l in 0..syms.len() {
            push(syms, heap, l);
        }
        // Lowest rank first, leftmost on ties; entries whose symbols changed since are stale.
        while let Some(Reverse((_, l, lid, rid))) = heap.pop() {
            let r = syms[l].next;
            if syms[l].id != lid || r == NONE || syms[r].id != rid || syms[l].end == syms[l].start {
                continue;
            }
            syms[l].id = self.merges[&(lid, rid)].1;
            syms[l].end = syms[r].end;
            syms[l].next = syms[r].next;
            syms[r].end = syms[r].start; // dead
            if syms[l].next != NONE {
                let n = syms[l].next;
                syms[n].prev = l;
            }
            if syms[l].prev != NONE {
                push(syms, heap, syms[l].prev);
            }
            push(syms, heap, l);
        }
        let mut i = if syms.is_empty() { NONE } else { 0 };
        while i != NONE {
            let s = &syms[i];
            if s.id < self.n_vocab {
                out.push(s.id);
            } else {
                out.extend(
                    word[s.start..s.end]
                        .iter()
                        .filter_map(|&b| self.byte_fallback[b as usize]),
                );
            }
            i = s.next;
        }
    }
}
