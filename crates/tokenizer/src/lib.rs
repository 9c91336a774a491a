//! Tokenizers built from GGUF metadata, matching llama.cpp token for token.
//!
//! - `gpt2`: byte-level BPE with the pre-tokenizer that `tokenizer.ggml.pre` names;
//! - `llama`: SentencePiece-style BPE over scores, with `<0xNN>` byte fallback;
//! - `no_vocab`: no text at all (benchmark models); ids decode as `[id]`.
//!
//! Special tokens are cut out of the text first, as llama.cpp does; decoding is streaming-safe
//! ([`StreamDecoder`]). Chat templates live in [`chat`].

mod bpe;
pub mod chat;
mod decode;
mod error;
mod known;
mod pretok;
mod special;
mod spm;
mod vocab;

pub use chat::{ChatTemplate, Message};
pub use decode::StreamDecoder;
pub use error::{Result, TokenizerError};
pub use vocab::SpecialTokens;

use bpe::Bpe;
use decode::Spelling;
use ferrolm_gguf::GgufFile;
use special::Fragment;
use std::borrow::Cow;
use vocab::{attr, Family, Vocab};

/// The tokenizer family of a model (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabType {
    /// `gpt2`: byte-level BPE.
    Bpe,
    /// `llama`: SentencePiece-style.
    Spm,
    /// `no_vocab`: ids only.
    None,
}

enum Kind {
    Bpe(Box<Bpe>),
    Spm,
    NoVocab,
}

pub struct Tokenizer {
    model: String,
    pre: Option<String>,
    kind: Kind,
    vocab: Vocab,
    n_vocab: usize,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    pieces: Vec<Box<[u8]>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model)
            .field("pre", &self.pre)
            .field("n_vocab", &self.n_vocab)
            .field("special", &self.vocab.special)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

// Shared across threads by servers and batch tokenization.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
    send_sync::<ChatTemplate>();
};

impl Tokenizer {
    /// Builds the tokenizer that `f`'s `tokenizer.ggml.*` metadata describes.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let model = f.get_str("tokenizer.ggml.model")?.to_owned();
        let pre = f
            .get("tokenizer.ggml.pre")
            .map(|_| f.get_str("tokenizer.ggml.pre").map(str::to_owned))
            .transpose()?;
        match model.as_str() {
            "no_vocab" | "none" => Ok(Self::no_vocab(f, model, pre)),
            "llama" => {
                let defaults = vocab::Defaults {
                    add_bos: true,
                    no_bos: false,
                };
                let l = vocab::load(f, Family::Spm, defaults)?;
                let pieces = decode::pieces(&l.vocab, Spelling::Sentencepiece);
                Ok(Self::build(model, pre, Kind::Spm, l, pieces))
            }
            "gpt2" => {
                // A file without `tokenizer.ggml.pre` gets llama.cpp's "default" pre-tokenizer.
                let name = pre.as_deref().unwrap_or("default");
                let spec = pretok::find(name).ok_or_else(|| {
                    TokenizerError::UnknownPre(name.to_owned(), pretok::supported_names())
                })?;
                let defaults = vocab::Defaults {
                    add_bos: spec.add_bos,
                    no_bos: spec.no_bos,
                };
                let l = vocab::load(f, Family::Bpe, defaults)?;
                let bpe = Bpe::new(f, &l.vocab, spec)?;
                let pieces = decode::pieces(&l.vocab, Spelling::ByteLevel);
                Ok(Self::build(model, pre, Kind::Bpe(Box::new(bpe)), l, pieces))
            }
            _ => Err(TokenizerError::UnknownModel(model)),
        }
    }

    fn build(
        model: String,
        pre: Option<String>,
        kind: Kind,
        l: vocab::Loaded,
        pieces: Vec<Box<[u8]>>,
    ) -> Self {
        Self {
            model,
            pre,
            kind,
            n_vocab: l.vocab.tokens.len(),
            vocab: l.vocab,
            add_bos: l.add_bos,
            add_eos: l.add_eos,
            add_space_prefix: l.add_space_prefix,
            pieces,
        }
    }

    fn no_vocab(f: &GgufFile, model: String, pre: Option<String>) -> Self {
        // llama.cpp sizes the (dummy) vocabulary from `<arch>.vocab_size` when present.
        let n_vocab = f
            .architecture()
            .ok()
            .and_then(|a| f.get_usize(&format!("{a}.vocab_size")).ok())
            .unwrap_or(0);
        Self {
            model,
            pre,
            kind: Kind::NoVocab,
            vocab: vocab::Vocab::empty(),
            n_vocab,
            add_bos: false,
            add_eos: false,
            add_space_prefix: false,
            pieces: Vec::new(),
        }
    }

    /// Tokenizes `text`. `add_special` adds BOS/EOS where the model asks for them;
    /// `parse_special` turns control-token texts (`<|im_start|>`) into their ids instead of
    /// spelling them out.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let frags = special::partition(&self.vocab, text, parse_special);
        self.encode_fragments(text, add_special, frags)
    }

    /// Encodes `text` with special tokens parsed, except inside the byte ranges `literal`
    /// (sorted, disjoint), which are plain text: a chat message's content that spells
    /// `<|im_start|>` stays those characters instead of becoming the control token.
    pub fn encode_literal(
        &self,
        text: &str,
        add_special: bool,
        literal: &[std::ops::Range<usize>],
    ) -> Result<Vec<u32>> {
        let frags = special::partition_literal(&self.vocab, text, literal);
        self.encode_fragments(text, add_special, frags)
    }

    fn encode_fragments(
        &self,
        text: &str,
        add_special: bool,
        frags: Vec<Fragment>,
    ) -> Result<Vec<u32>> {
        let v = &self.vocab;
        let mut out = Vec::new();
        if matches!(self.kind, Kind::NoVocab) {
            return Err(TokenizerError::NoVocab);
        }
        if add_special && self.add_bos {
            out.extend(v.special.bos);
        }
        // SentencePiece puts a space in front of every text that starts the input or follows a
        // special token.
        let mut after_special = true;
        for frag in frags {
            match (frag, &self.kind) {
                (Fragment::Token(id), _) => {
                    out.push(id);
                    after_special = true;
                }
                (Fragment::Text(s, e), Kind::Bpe(bpe)) => bpe.encode(v, &text[s..e], &mut out)?,
                (Fragment::Text(s, e), _) => {
                    let mut t = String::with_capacity(e - s + 1);
                    if self.add_space_prefix && after_special {
                        t.push(' ');
                    }
                    t.push_str(&text[s..e]);
                    spm::encode(v, &t.replace(' ', "▁"), &mut out)?;
                    after_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(v.special.eos);
        }
        Ok(out)
    }

    /// The bytes of one token, as llama.cpp's `token_to_piece`: possibly part of a UTF-8
    /// character. With `special` false, control and unknown tokens give nothing.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Cow<'_, [u8]>> {
        self.check(id)?;
        if matches!(self.kind, Kind::NoVocab) {
            return Ok(Cow::Owned(format!("[{id}]").into_bytes()));
        }
        if !special && self.vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0 {
            return Ok(Cow::Borrowed(&[]));
        }
        Ok(Cow::Borrowed(&self.pieces[id as usize]))
    }

    /// Decodes a whole sequence: control tokens hidden, and (for tokenizers that add one) the
    /// leading space that tokenization put in front removed, so that
    /// `decode(encode(text)) == text` for ordinary text. The result is the concatenation of the
    /// pieces, exactly what streaming the same ids gives; llama.cpp's optional `clean_spaces`
    /// post-pass (`" ,"` → `","` for some GPT-2 vocabularies) is not applied.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_with(ids, false)
    }

    /// As [`decode`](Self::decode), optionally rendering control tokens as their text.
    pub fn decode_with(&self, ids: &[u32], render_special: bool) -> Result<String> {
        self.stream_decoder()
            .render_special(render_special)
            .strip_leading_space(self.add_space_prefix)
            .decode_all(ids)
    }

    /// A decoder for ids that arrive one at a time (generation).
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    fn check(&self, id: u32) -> Result<()> {
        // A no_vocab model without a declared size accepts any id.
        let unbounded = matches!(self.kind, Kind::NoVocab) && self.n_vocab == 0;
        if (id as usize) < self.n_vocab || unbounded {
            Ok(())
        } else {
            Err(TokenizerError::BadToken {
                id,
                n_vocab: self.n_vocab,
            })
        }
    }

    pub fn vocab_type(&self) -> VocabType {
        match self.kind {
            Kind::Bpe(_) => VocabType::Bpe,
            Kind::Spm => VocabType::Spm,
            Kind::NoVocab => VocabType::None,
        }
    }

    /// `tokenizer.ggml.model` as written in the file.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// `tokenizer.ggml.pre` as written in the file, if any.
    pub fn pre(&self) -> Option<&str> {
        self.pre.as_deref()
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The token's text as stored in the vocabulary (byte-level or `▁` spelling).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of the token whose stored text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.vocab.special
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.special.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.vocab.special.eot
    }

    /// Whether `add_special` tokenization starts with BOS / ends with EOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether tokenization puts a space in front of the text (SentencePiece).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// End of generation: EOS, EOT, EOM, and the tokens llama.cpp recognises by text
    /// (`<|im_end|>`, `<|endoftext|>`, `<end_of_turn>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.vocab.eog.iter().copied()
    }

    /// Control tokens are hidden when decoding unless asked for.
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab
            .attrs
            .get(id as usize)
            .is_some_and(|a| a & attr::CONTROL != 0)
    }
}
