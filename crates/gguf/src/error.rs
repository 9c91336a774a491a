//! Errors that name the file, the field or tensor, and what is wrong.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Invalid { path: PathBuf, what: String },
    #[error("metadata key `{key}`: {what}")]
    Metadata { key: String, what: String },
    #[error("tensor `{name}`: {what}")]
    Tensor { name: String, what: String },
    #[error("writer: {0}")]
    Write(String),
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
