//! The kernel sources, embedded in the binary. One `.cu` file per op family; the headers are
//! handed to NVRTC from memory, so `#include "quant.cuh"` needs no file on disk.
//!
//! build.rs compiles this module too (`#[path]`), so the embedded images and the binary agree
//! on what a file is and on its [`source_hash`](KernelFile::source_hash).

use sha2::{Digest, Sha256};

/// A source file under `crates/cuda/kernels/`.
#[derive(Clone, Copy, Debug)]
pub struct KernelFile {
    pub name: &'static str,
    pub source: &'static str,
}

impl KernelFile {
    /// SHA-256 (hex) of this file's name and source and of every header it may include: what a
    /// compiled image depends on besides the compiler and its options.
    pub fn source_hash(&self) -> String {
        let mut h = Sha256::new();
        for part in std::iter::once(self)
            .chain(HEADERS)
            .flat_map(|f| [f.name, f.source])
        {
            // Length-prefixed, so that no two different inputs hash the same bytes.
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The file with this name among [`FILES`].
    pub fn named(name: &str) -> Option<&'static KernelFile> {
        FILES.iter().find(|f| f.name == name)
    }
}

macro_rules! kernel_file {
    ($name:literal) => {
        KernelFile {
            name: $name,
            source: include_str!(concat!("../kernels/", $name)),
        }
    };
}

/// Headers every file may include by name.
pub const HEADERS: &[KernelFile] = &[
    kernel_file!("common.cuh"),
    kernel_file!("quant.cuh"),
    kernel_file!("quant_k.cuh"),
    kernel_file!("mmq_tile.cuh"),
    kernel_file!("mmvq.cuh"),
    kernel_file!("mmq_mma.cuh"),
    kernel_file!("mma_rows.cuh"),
    kernel_file!("attention.cuh"),
    kernel_file!("attention_group.cuh"),
    kernel_file!("attention_tc.cuh"),
    kernel_file!("mma_f16.cuh"),
    kernel_file!("kquant_f16.cuh"),
    kernel_file!("norm.cuh"),
    kernel_file!("rope.cuh"),
];

pub const ELEMENTWISE: KernelFile = kernel_file!("elementwise.cu");
pub const NORM_ROPE: KernelFile = kernel_file!("norm_rope.cu");
pub const MMVQ: KernelFile = kernel_file!("mmvq.cu");
pub const MMVQ_MMA: KernelFile = kernel_file!("mmvq_mma.cu");
pub const MMVQ_STAGED: KernelFile = kernel_file!("mmvq_staged.cu");
pub const MATVEC_F16: KernelFile = kernel_file!("matvec_f16.cu");
pub const MMQ: KernelFile = kernel_file!("mmq.cu");
pub const MOE_GEMM: KernelFile = kernel_file!("moe_gemm.cu");
pub const QUANTIZE: KernelFile = kernel_file!("quantize.cu");
pub const ATTENTION: KernelFile = kernel_file!("attention.cu");
pub const ATTENTION_PREFILL: KernelFile = kernel_file!("attention_prefill.cu");
pub const FLASH_ATTN: KernelFile = kernel_file!("flash_attn.cu");
pub const ATTENTION_ROWS: KernelFile = kernel_file!("attention_rows.cu");
pub const EMBED: KernelFile = kernel_file!("embed.cu");
pub const GEMM_F32: KernelFile = kernel_file!("gemm_f32.cu");
pub const MOE_ROUTE: KernelFile = kernel_file!("moe_route.cu");
pub const MOE_DECODE: KernelFile = kernel_file!("moe_decode.cu");
pub const MOE_MMA: KernelFile = kernel_file!("moe_mma.cu");
pub const GEMM_WGMMA: KernelFile = kernel_file!("gemm_wgmma.cu");
pub const L2_AHEAD: KernelFile = kernel_file!("l2_ahead.cu");

/// Every compilable file (what the CI test compiles).
pub const FILES: &[KernelFile] = &[
    ELEMENTWISE,
    NORM_ROPE,
    MMVQ,
    MMVQ_MMA,
    MMVQ_STAGED,
    MATVEC_F16,
    MMQ,
    MOE_GEMM,
    QUANTIZE,
    ATTENTION,
    ATTENTION_PREFILL,
    FLASH_ATTN,
    ATTENTION_ROWS,
    EMBED,
    GEMM_F32,
    MOE_ROUTE,
    MOE_DECODE,
    MOE_MMA,
    GEMM_WGMMA,
    L2_AHEAD,
];
