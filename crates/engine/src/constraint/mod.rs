//! Structured output: decoding constrained by a JSON schema or a grammar, through
//! [llguidance](https://github.com/guidance-ai/llguidance).
//!
//! Three layers, each made once at its own scope:
//! - [`ConstraintVocab`]: llguidance's token environment (a trie of every token's bytes) and
//!   parser factory, built from the model's tokenizer **once per loaded model** and shared
//!   (cheap to clone).
//! - [`Grammar`]: a [`GrammarSpec`] compiled against that vocabulary, **once per request**.
//!   Bad input fails here with a [`ConstraintError::Invalid`] that carries llguidance's reason.
//! - [`TokenMatcher`]: one sequence's parser state. The decode loop alternates
//!   [`TokenMatcher::compute_mask`] (which tokens may come next, as a [`TokenMask`] that the
//!   [`crate::Sampler`] applies: disallowed logits become -inf) and
//!   [`TokenMatcher::accept`] (commit the sampled token). End-of-generation tokens are allowed
//!   exactly when the grammar accepts; [`TokenMatcher::is_finished`] says when the grammar can
//!   take nothing more, so the loop stops as if the model had ended its turn.
//!
//! Computing a mask costs up to a millisecond; [`overlap`] runs the commit and the next
//! mask on a helper thread while the forward pass for that same token runs, so the mask is
//! ready when the logits are.

mod gbnf;
mod matcher;
mod vocab;

pub use gbnf::gbnf_to_lark;
pub use matcher::{overlap, Grammar, TokenMask, TokenMatcher};
pub use vocab::ConstraintVocab;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON schema. `strict`: every keyword must be one llguidance enforces (else the schema
    /// is refused); not strict, unsupported keywords are ignored (best effort).
    JsonSchema {
        schema: serde_json::Value,
        strict: bool,
    },
    /// llguidance's Lark dialect (<https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md>).
    Lark(String),
    /// llama.cpp's GBNF, converted to Lark by [`gbnf_to_lark`].
    Gbnf(String),
}

/// The kind of [`GrammarSpec`], for messages.
impl GrammarSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            GrammarSpec::JsonObject => "json_object",
            GrammarSpec::JsonSchema { .. } => "json_schema",
            GrammarSpec::Lark(_) => "lark grammar",
            GrammarSpec::Gbnf(_) => "gbnf grammar",
        }
    }

    /// A `grammar` text as llama.cpp's server takes it: Lark when it starts with
    /// `%llguidance` (llama.cpp's marker for llguidance grammars), GBNF otherwise.
    pub fn from_grammar_text(text: &str) -> Self {
        if text.trim_start().starts_with("%llguidance") {
            GrammarSpec::Lark(text.to_owned())
        } else {
            GrammarSpec::Gbnf(text.to_owned())
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// The schema or grammar cannot be compiled; `reason` is llguidance's (or the GBNF
    /// converter's) explanation.
    #[error("invalid {kind}: {reason}")]
    Invalid { kind: &'static str, reason: String },
    /// The tokenizer's vocabulary cannot be turned into llguidance's token trie.
    #[error("building the token vocabulary for constrained decoding: {0}")]
    Vocab(String),
    /// The parser refused a token or failed while computing a mask (a token sampled outside
    /// the mask, or an internal limit of llguidance).
    #[error("constrained decoding failed: {0}")]
    Matcher(String),
}
