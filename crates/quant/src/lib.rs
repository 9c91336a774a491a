//! ggml block formats. Each type's layout, dequantize and quantize are defined once here, and
//! every other part of ferrolm (CPU kernels, CUDA uploads, tests, tools) goes through them.

pub use ferrolm_gguf::GgmlType;
