//! Errors that name the metadata key, value or token involved.

use ferrolm_gguf::GgufError;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(
        "unknown tokenizer model `{0}` (tokenizer.ggml.model); supported: gpt2, llama, no_vocab"
    )]
    UnknownModel(String),
    #[error("unknown pre-tokenizer `{0}` (tokenizer.ggml.pre); supported: {1}")]
    UnknownPre(String, String),
    #[error("metadata key `{key}`: {what}")]
    Metadata { key: String, what: String },
    #[error("this model has no vocabulary (tokenizer.ggml.model = no_vocab): it cannot tokenize text; pass token ids instead")]
    NoVocab,
    #[error("token {id} is out of range: the vocabulary has {n_vocab} tokens")]
    BadToken { id: u32, n_vocab: usize },
    #[error(
        "byte 0x{0:02X} has no token (neither <0x{0:02X}> nor the raw byte is in the vocabulary)"
    )]
    NoByteToken(u8),
    #[error("pre-tokenizer regex failed: {0}")]
    Regex(String),
    #[error("chat template: {0}")]
    Template(String),
}

pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
