//! llguidance's view of the vocabulary: every token's bytes in a trie, built once per model.

use super::{ConstraintError, Grammar, GrammarSpec};
use ferrolm_tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::ParserFactory;
use std::sync::Arc;
use toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};

/// The token environment and parser factory for one model. Cheap to clone (shared).
#[derive(Clone)]
pub struct ConstraintVocab(pub(super) Arc<Inner>);

pub(super) struct Inner {
    pub factory: ParserFactory,
    /// Every end-of-generation id: the grammar's one EOS bit stands for all of them.
    pub eog: Vec<u32>,
    /// The trie's EOS id (the first of `eog`).
    pub eos: u32,
    pub n_vocab: usize,
}

impl ConstraintVocab {
    /// Builds the trie from `tok`'s token bytes for logits `n_vocab` wide (a model may pad
    /// its vocabulary past the tokenizer's: those ids are never allowed). Takes a fraction of
    /// a second for a 150k vocabulary: do it once per model.
    pub fn new(tok: &Tokenizer, n_vocab: usize) -> Result<Self, ConstraintError> {
        let eog: Vec<u32> = tok.eog_ids().filter(|&t| (t as usize) < n_vocab).collect();
        let eos = tok
            .eos()
            .filter(|t| eog.contains(t))
            .or_else(|| eog.first().copied())
            .ok_or_else(|| {
                ConstraintError::Vocab("the model declares no end-of-generation token".into())
            })?;
        let words: Vec<Vec<u8>> = (0..n_vocab as u32).map(|id| token_bytes(tok, id)).collect();
        let info = TokRxInfo {
            vocab_size: n_vocab as u32,
            tok_eos: eos,
            tok_bos: tok.bos(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        // llguidance's trie asserts on malformed input: keep a panic from taking the caller.
        let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words))
            .map_err(|_| ConstraintError::Vocab("llguidance refused the token list".into()))?;
        // Matching needs no tokenization of ours: the trie's greedy split is enough (it is only
        // used for forced-token shortcuts, which a non-canonical environment turns off).
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocab(e.to_string()))?;
        // Warnings would go to the server's stderr per request.
        factory.quiet();
        Ok(Self(Arc::new(Inner {
            factory,
            eog,
            eos,
            n_vocab,
        })))
    }

    /// Compiles `spec` against this vocabulary (once per request).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar, ConstraintError> {
        let invalid = |reason: String| ConstraintError::Invalid {
            kind: spec.kind(),
            reason,
        };
        let top = match spec {
            GrammarSpec::JsonObject => TopLevelGrammar::from_json_schema(json_options(
                serde_json::json!({"type": "object"}),
                true,
            )),
            GrammarSpec::JsonSchema { schema, strict } => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(invalid("a JSON schema must be an object".into()));
                }
                TopLevelGrammar::from_json_schema(json_options(schema.clone(), *strict))
            }
            GrammarSpec::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSpec::Gbnf(text) => {
                TopLevelGrammar::from_lark(super::gbnf_to_lark(text).map_err(invalid)?)
            }
        };
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.0.factory.create_parser(top)
        }))
        .map_err(|_| invalid("llguidance panicked while compiling it".into()))?
        .map_err(|e| invalid(e.to_string()))?;
        Ok(Grammar {
            parser,
            vocab: self.clone(),
        })
    }

    /// Width of the masks: the model's logits.
    pub fn n_vocab(&self) -> usize {
        self.0.n_vocab
    }
}

/// JSON without free whitespace (a model could otherwise fill `max_tokens` with spaces), and
/// `strict` as llguidance's "lenient" switch: not strict, unsupported keywords are ignored.
/// A schema's own `x-guidance` options win.
fn json_options(mut schema: serde_json::Value, strict: bool) -> serde_json::Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(
            || serde_json::json!({"whitespace_flexible": false, "lenient": !strict}),
        );
    }
    schema
}

/// A token's bytes as the trie wants them. Control tokens, and tokens with no bytes, become
/// llguidance's special tokens (`\xFF` then their text): a grammar never produces them by
/// accident. Ids past the tokenizer's (padding) get a name no text can spell.
fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    let special = |name: &str| [&[0xFF][..], name.as_bytes()].concat();
    if (id as usize) >= tok.n_vocab() {
        return special(&format!("<[{id}]>"));
    }
    if tok.is_control(id) || tok.is_eog(id) {
        return special(tok.token_text(id).unwrap_or("<control>"));
    }
    match tok.token_to_piece(id, false) {
        Ok(piece) if !piece.is_empty() => piece.into_owned(),
        _ => special(&format!("<[{id}]>")),
    }
}
