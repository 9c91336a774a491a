//! Errors that name the hyperparameter, tensor or file at fault.

use ferrolm_gguf::GgufError;
use ferrolm_quant::QuantError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error("unknown architecture `{name}`; supported: {supported}")]
    UnknownArch { name: String, supported: String },
    /// A hyperparameter that is present but unusable; `key` is the full GGUF key.
    #[error("hyperparameter `{key}`: {what}")]
    Hparam { key: String, what: String },
    #[error("tensor `{name}`: {what}")]
    Tensor { name: String, what: String },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
