//! Token → bytes (llama.cpp's `token_to_piece`), and a streaming decoder that only ever yields
//! whole UTF-8 characters.

use crate::bpe::char_to_byte;
use crate::error::Result;
use crate::vocab::{attr, Vocab};
use crate::Tokenizer;
use std::fmt::Write as _;

/// How the normal tokens of a vocabulary spell their bytes.
#[derive(Clone, Copy)]
pub(crate) enum Spelling {
    /// GPT-2 byte-to-character table.
    ByteLevel,
    /// SentencePiece: `▁` stands for a space.
    Sentencepiece,
}

/// The bytes of every token as llama.cpp renders it with `special = true`; with
/// `special = false` control and unknown tokens render as nothing instead.
pub(crate) fn pieces(vocab: &Vocab, spelling: Spelling) -> Vec<Box<[u8]>> {
    vocab
        .tokens
        .iter()
        .zip(&vocab.attrs)
        .map(|(text, &a)| -> Box<[u8]> {
            if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
                text.as_bytes().into()
            } else if a & attr::NORMAL != 0 {
                match spelling {
                    Spelling::ByteLevel => byte_level(text),
                    Spelling::Sentencepiece => text.replace('▁', " ").into_bytes().into(),
                }
            } else if a & attr::BYTE != 0 {
                // `<0xNN>`
                match text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => vec![b].into(),
                    None => text.as_bytes().into(),
                }
            } else {
                Box::default() // unused and undefined tokens render as nothing
            }
        })
        .collect()
}

fn byte_level(text: &str) -> Box<[u8]> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                // What llama.cpp writes for a character outside the byte table.
                let mut s = String::from("[UNK_BYTE_0x");
                for b in c.to_string().bytes() {
                    let _ = write!(s, "{b:02x}");
                }
                s.push_str(text);
                s.push(']');
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
    out.into()
}

/// Decodes ids one at a time, holding back a multi-byte character until all its bytes arrived.
///
/// Control tokens render as nothing unless [`render_special`](Self::render_special) is set.
/// Bytes that can never form valid UTF-8 come out as U+FFFD.
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u8>,
    render_special: bool,
    strip_space: bool,
}

impl<'t> StreamDecoder<'t> {
    pub(crate) fn new(tok: &'t Tokenizer) -> Self {
        Self {
            tok,
            pending: Vec::new(),
            render_special: false,
            strip_space: false,
        }
    }

    /// Renders control tokens (`<|im_end|>`, `<s>`) as their text.
    pub fn render_special(mut self, yes: bool) -> Self {
        self.render_special = yes;
        self
    }

    /// Drops one space at the start of the first piece that renders any text: the space a
    /// SentencePiece tokenizer adds in front of the input (see
    /// [`Tokenizer::add_space_prefix`]). Off by default, since a continuation (generated text)
    /// keeps its leading space.
    pub fn strip_leading_space(mut self, yes: bool) -> Self {
        self.strip_space = yes;
        self
    }

    /// Feeds one token; returns the text that became complete (often empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tok.token_to_piece(id, self.render_special)?;
        let mut piece: &[u8] = &piece;
        if self.strip_space && !piece.is_empty() {
            self.strip_space = false;
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
        }
        self.pending.extend_from_slice(piece);
        Ok(self.take_complete())
    }

    /// Returns whatever is still held back (an incomplete character, as U+FFFD) and resets.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }

    /// Feeds every id and finishes.
    pub fn decode_all(mut self, ids: &[u32]) -> Result<String> {
        let mut out = String::new();
        for &id in ids {
            out.push_str(&self.push(id)?);
        }
        out.push_str(&self.finish());
        Ok(out)
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut at = 0;
        loop {
            match std::str::from_utf8(&self.pending[at..]) {
                Ok(s) => {
                    out.push_str(s);
                    at = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[at..at + valid]).unwrap());
                    at += valid;
                    match e.error_len() {
                        None => break, // an incomplete character at the end: wait for more
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            at += n;
                        }
                    }
                }
            }
        }
        self.pending.drain(..at);
        out
    }
}
