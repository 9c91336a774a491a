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
    // One literal range over everything: only user-defined tokens are matched.
    let whole = std::iter::once(0..text.len());
    let literal: Vec<std::ops::Range<usize>> = whole.filter(|_| !parse_special).collect();
    partition_literal(vocab, text, &literal)
}

/// As [`partition`] with `parse_special` set, except inside the byte ranges `literal` (sorted,
/// disjoint: chat message contents), where control and unknown tokens are not matched. Text
/// fragments that end up adjacent are joined again, so a literal range without special-token
/// text tokenizes exactly as if it had no boundary.
pub(crate) fn partition_literal(
    vocab: &Vocab,
    text: &str,
    literal: &[std::ops::Range<usize>],
) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    // (start, end, literal)
    let mut frags: Vec<(usize, usize, bool)> = Vec::new();
    let mut at = 0;
    for r in literal {
        if r.start > at {
            frags.push((at, r.start, false));
        }
        if r.end > r.start {
            frags.push((r.start, r.end, true));
        }
        at = at.max(r.end);
    }
    if at < text.len() {
        frags.push((at, text.len(), false));
    }
    // A token in the list is (usize::MAX, id, false).
    const TOKEN: usize = usize::MAX;
    for &id in &vocab.special_cache {
        let a = vocab.attr(id);
        let control = a & (attr::CONTROL | attr::UNKNOWN) != 0;
        let needle = vocab.tokens[id as usize].as_str();
        let splits = |&(s, e, lit): &(usize, usize, bool)| {
            s != TOKEN && !(control && lit) && text[s..e].contains(needle)
        };
        if !frags.iter().any(splits) {
            continue; // the common case: nothing to split, keep the list as it is
        }
        let mut out = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            if !splits(&f) {
                out.push(f);
                continue;
            }
            let (start, end, lit) = f;
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
                    out.push((at, left_end, lit));
                }
                out.push((TOKEN, id as usize, false));
                at = m + needle.len();
                if a & attr::RSTRIP != 0 {
                    while at < end && c_space(bytes[at]) {
                        at += 1;
                    }
                }
            }
            if at < end {
                out.push((at, end, lit));
            }
        }
        frags = out;
    }
    let mut result: Vec<Fragment> = Vec::with_capacity(frags.len());
    for (s, e, _) in frags {
        match (result.last_mut(), s) {
            (_, TOKEN) => result.push(Fragment::Token(e as u32)),
            (Some(Fragment::Text(_, last_end)), _) if *last_end == s => *last_end = e,
            _ => result.push(Fragment::Text(s, e)),
        }
    }
    result
}
