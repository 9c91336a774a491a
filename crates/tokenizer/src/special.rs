//! Splitting special tokens out of text before tokenization, as llama.cpp's
//! `tokenizer_st_partition`: each special token in turn (longest first) is cut out of every
//! stretch of raw text that remains, leftmost occurrences first.

use crate::vocab::{attr, Vocab};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// A byte range of the input.
    Text(usize, usize),
    Token(u32),
}

/// C's `isspace` in the "C" locale, which llama.cpp uses for LSTRIP/RSTRIP.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Control and unknown tokens are matched only when `parse_special` is set; user-defined ones
/// always are (as in Hugging Face `tokenizers`).
pub(crate) fn partition(vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut frags = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0, text.len())]
    };
    for &id in &vocab.special_cache {
        let a = vocab.attr(id);
        if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = vocab.tokens[id as usize].as_str();
        if !frags
            .iter()
            .any(|f| matches!(*f, Fragment::Text(s, e) if text[s..e].contains(needle)))
        {
            continue; // the common case: nothing to split, keep the list as it is
        }
        let mut out = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(start, end) = f else {
                out.push(f);
                continue;
            };
            let mut at = start;
            while let Some(pos) = text[at..end].find(needle) {
                let m = at + pos;
                let mut left_end = m;
                if a & attr::LSTRIP != 0 {
                    while left_end > at && c_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > at {
                    out.push(Fragment::Text(at, left_end));
                }
                out.push(Fragment::Token(id));
                at = m + needle.len();
                if a & attr::RSTRIP != 0 {
                    while at < end && c_space(bytes[at]) {
                        at += 1;
                    }
                }
            }
            if at < end {
                out.push(Fragment::Text(at, end));
            }
        }
        frags = out;
    }
    frags
}
