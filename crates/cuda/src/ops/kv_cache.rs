//! The KV cache on the device: its element types ([`KvFormat`]: f16, f32, or llama.cpp's
//! q8_0/q4_0 blocks) and one layer's keys and values ([`KvCache`]), head-major as the CPU's `LayerKv`, at
//! the head sizes `kernels/attention.cu` and `attention_prefill.cu` have kernels for
//! (`ATTN_HEAD_DIMS`); the kernels that store into it and attend over it are `attention.rs`'s.

use super::attention::dim_index;
use crate::device::CudaDevice;
use crate::error::{CudaError, Result};
use cudarc::driver::CudaSlice;

/// The KV cache's element type on the device (`-ctk`/`-ctv`, one type for both).
/// [`ALL`](Self::ALL) lists them in the order of [`index`](Self::index) (the launcher's
/// per-format tables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvFormat {
    #[default]
    F16,
    /// quant.cuh's `block_q8_0`: an f16 scale and 32 codes, 34 bytes.
    Q8_0,
    /// quant.cuh's `block_q4_0`: an f16 scale and 32 nibbles, 18 bytes.
    Q4_0,
    /// Plain f32 (`-ctk f32 -ctv f32`, llama.cpp's precise configuration): 4 bytes an
    /// element, any head size. Read by the kernels that take an element type (flash-decoding
    /// a query head a block, the scalar and CPU-order prefills), not by the f16-only ones.
    F32,
}

impl KvFormat {
    /// In [`index`](Self::index) order.
    pub(super) const ALL: [KvFormat; 4] =
        [KvFormat::F16, KvFormat::Q8_0, KvFormat::Q4_0, KvFormat::F32];

    /// llama.cpp's name.
    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F16 => "f16",
            KvFormat::Q8_0 => "q8_0",
            KvFormat::Q4_0 => "q4_0",
            KvFormat::F32 => "f32",
        }
    }

    /// A block format (q8_0, q4_0; ggml's `ggml_is_quantized`): rows of whole 32-element
    /// blocks, rotated by llama.cpp's Walsh-Hadamard transform, queries rounded through Q8_0
    /// for the CPU's integer dots. Not f16 or f32.
    pub fn is_block(self) -> bool {
        matches!(self, KvFormat::Q8_0 | KvFormat::Q4_0)
    }

    /// Whether a cache of this format can hold heads of `head_dim` (block formats: whole
    /// 32-element blocks a row, as the CPU's `KvType::check`).
    pub fn holds(self, head_dim: usize) -> bool {
        !self.is_block() || head_dim.is_multiple_of(32)
    }

    /// Bytes of a row of `elems` elements (a multiple of 32 for the block formats).
    pub fn row_bytes(self, elems: usize) -> usize {
        match self {
            KvFormat::F16 => 2 * elems,
            KvFormat::Q8_0 => elems / 32 * 34,
            KvFormat::Q4_0 => elems / 32 * 18,
            KvFormat::F32 => 4 * elems,
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The kernels' name infix: `attn_decode_split_q8_0_d64`, `attn_prefill_f32_d80`; f16's
    /// have none.
    pub(super) fn infix(self) -> String {
        match self {
            KvFormat::F16 => String::new(),
            q => format!("_{}", q.name()),
        }
    }
}

/// One layer's keys and values on the device as bytes of `format`, head-major
/// `[n_kv_head][n_ctx][head_dim]` as the CPU's `LayerKv`.
pub struct KvCache {
    pub k: CudaSlice<u8>,
    pub v: CudaSlice<u8>,
    pub format: KvFormat,
    pub n_ctx: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// llama.cpp's Walsh-Hadamard rotation of a quantized cache, as the CPU's `LayerKv`: k (and
    /// q) rotated in chunks of `k_rot`, v in chunks of `v_rot` (and the output back); the
    /// caller rotates (`Elementwise::hadamard`), the kernels see rotated values only.
    pub k_rot: Option<usize>,
    pub v_rot: Option<usize>,
}

impl KvCache {
    pub fn new(
        dev: &CudaDevice,
        format: KvFormat,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
    ) -> Result<Self> {
        if !format.holds(head_dim) {
            return Err(CudaError::Invalid(format!(
                "a {} KV cache needs a head size that is a multiple of 32, not {head_dim}",
                format.name()
            )));
        }
        dim_index(head_dim)?; // a model the kernels cannot attend for fails at load
        let bytes = n_ctx * n_kv_head * format.row_bytes(head_dim);
        // As ferrolm_cpu::hadamard: K in the largest power of two from 64 dividing head_dim
        // (at most 256 among ATTN_HEAD_DIMS), V in 64s, when 64 divides head_dim.
        let rot = (format.is_block() && head_dim.is_multiple_of(64)).then_some(64);
        Ok(Self {
            k: dev.zeros(bytes)?,
            v: dev.zeros(bytes)?,
            format,
            n_ctx,
            n_kv_head,
            head_dim,
            k_rot: rot.map(|_| 1 << head_dim.trailing_zeros()),
            v_rot: rot,
        })
    }
}
