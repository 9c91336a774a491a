//! Errors that name the file, the field or tensor, and what is wrong.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    // The io error is part of the message rather than a `source`, so a report that prints
    // the chain does not repeat it.
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}: {what}", path.display())]
    Invalid { path: PathBuf, what: String },
    #[error("metadata key `{key}`: {what}")]
    Metadata { key: String, what: String },
    #[error("tensor `{name}`: {what}")]
    Tensor { name: String, what: String },
    #[error("writer: {0}")]
    Write(String),
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
