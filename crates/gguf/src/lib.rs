//! The GGUF file format (v2 and v3): a validated, zero-copy reader over mmap, and a writer.
//!
//! This crate knows nothing about models or quantization math; it knows the on-disk layout,
//! including how many bytes a tensor of each [`GgmlType`] occupies.

mod error;
mod file;
mod ggml_type;
mod reader;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::GgufFile;
pub use ggml_type::GgmlType;
pub use reader::TensorInfo;
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorDataWriter};
