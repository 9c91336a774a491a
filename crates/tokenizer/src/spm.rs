//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`), as llama.cpp's `llm_tokenizer_spm`:
//! start from characters, repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring token, and spell what remains unknown as `<0xNN>` byte tokens.

use crate::error::{Result, TokenizerError};
use crate::vocab::Vocab;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Sym {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

// Highest score first; on equal scores the leftmost pair.
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}

/// The token for one byte: `<0xNN>`, else the byte itself as a one-character token.
pub(crate) fn byte_token(vocab: &Vocab, b: u8) -> Result<u32> {
    vocab
        .id(&format!("<0x{b:02X}>"))
        .or_else(|| {
            b.is_ascii()
                .then(|| vocab.id(&(b as char).to_string()))
                .flatten()
        })
        .ok_or(TokenizerError::NoByteToken(b))
}

/// Appends the tokens of `text`, which already has spaces escaped as `▁`.
pub(crate) fn encode(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
    let mut syms: Vec<Sym> = text
        .char_indices()
        .map(|(start, c)| Sym {
            start,
            len: c.len_utf8(),
            prev: NONE,
            next: NONE,
        })
        .collect();
    let n = syms.len();
    for (i, s) in syms.iter_mut().enumerate() {
        s.prev = if i == 0 { NONE } else { i - 1 };
        s.next = if i + 1 == n { NONE } else { i + 1 };
    }
    let mut heap = BinaryHeap::new();
    let try_add = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
        if left == NONE || right == NONE {
            return;
        }
        let (start, len) = (syms[left].start, syms[left].len + syms[right].len);
        if let Some(id) = vocab.id(&text[start..start + len]) {
            heap.push(Bigram {
                score: vocab.scores[id as usize],
                left,
                right,
                len,
            });
        }
    };
    for i in 1..n {
        try_add(&syms, &mut heap, i - 1, i);
    }
    while let Some(b) = heap.pop() {
        let (l, r) = (&syms[b.left], &syms[b.right]);
        // Stale: one side was merged away or grew since the pair was queued.
        if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
            continue;
        }
        let next = r.next;
        syms[b.left].len = b.len;
        syms[b.left].next = next;
        syms[b.right].len = 0;
        if next != NONE {
            syms[next].prev = b.left;
        }
        try_add(&syms, &mut heap, syms[b.left].prev, b.left);
        try_add(&syms, &mut heap, b.left, next);
    }
    let mut i = if n == 0 { NONE } else { 0 };
    while i != NONE {
        let s = &syms[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    out.push(byte_token(vocab, b)?);
                }
            }
        }
        i = s.next;
    }
    Ok(())
}
