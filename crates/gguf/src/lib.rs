//! The GGUF file format (v2 and v3): a validated, zero-copy reader over mmap, and a writer.
//!
//! This crate knows nothing about models or quantization math; it knows the on-disk layout,
//! including how many bytes a tensor of each [`GgmlType`] occupies.

mod ggml_type;

pub use ggml_type::GgmlType;
