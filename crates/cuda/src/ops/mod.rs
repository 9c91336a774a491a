//! One thin launcher per kernel family. Each holds its loaded functions and the stream, checks
//! shapes on the host (a wrong size is a panic, as in the CPU crate: it is a caller's bug), and
//! only queues work: nothing here synchronizes. Launch errors are returned. Where a family has
//! several kernels for one op, the caller passes the choice (the plan's, `crate::plan`); no
//! launcher reads the environment.
//!
//! Outside this crate, this module is the kernel-check surface: `ferrolm-cuda-checks` drives
//! the launchers directly against the CPU's functions. The backend's tuning constants and
//! helpers stay crate-private.

mod attention;
mod attention_rows;
mod elementwise;
mod embed;
pub mod formats;
mod gemm_f32;
mod gemm_wgmma;
mod kv_blocks;
mod kv_cache;
mod l2_ahead;
pub mod launch;
mod matvec_f16;
mod mmq;
mod mmvq;
mod mmvq_mma;
mod mmvq_staged;
mod moe_decode;
mod moe_gemm;
mod moe_mma;
mod moe_route;
mod moe_slices;
mod norm_rope;
mod quantize;

pub use attention::{
    Attention, AttnSoftmax, DecodeKernel, DecodeRotation, DecodeWork, PrefillKernel, ATTN_GROUPS,
    ATTN_HEAD_DIMS, ATTN_MAX_SPLITS, ATTN_TC_DIMS, ATTN_TC_GROUPS, MMA_HEAD_DIMS,
};
pub use attention_rows::{AttentionRows, RowSeq, RowsTable, ROWS_MAX_GROUP};
pub use elementwise::Elementwise;
pub use embed::Embed;
pub use gemm_f32::GemmF32;
pub use gemm_wgmma::{
    ExpertBufs, ExpertRows, GemmWgmma, DECODE_MAX_TOKENS as F16_DECODE_MAX_ROWS, F16_SPLIT_TILES,
};
pub use kv_cache::{BlockTable, KvCache, KvFormat, KvPagesArg, KvPool};
pub use l2_ahead::{span_of, L2Ahead, L2AheadForm, L2AheadHow, L2AheadTable};
pub use matvec_f16::{
    MatVecF16, MatVecF16How, F16_MATVEC_CLUSTER_MAX, F16_MATVEC_MATS, F16_MATVEC_MAX_ROWS,
    F16_MATVEC_SPLIT_BLOCKS,
};
pub use mmq::{Mmq, MmqOrder, MmqTile, MMQ_BK, MMQ_MAX_SPLITS, MMQ_SPLIT_TILES, MMQ_TILES};
pub(crate) use mmvq::MMVQ_MAX_COLS;
pub use mmvq::{Mmvq, NormIn, PairOut, QuantMatrix, TRIPLES};
pub use mmvq_mma::{MmvqMma, MMA_MV_MAX_ROWS};
pub use mmvq_staged::{MmvqStaged, STAGED_MAX_ROWS, STAGED_MIN_ROWS, STAGED_SPLIT_BLOCKS};
pub use moe_decode::{MoeDecode, MoeDecodeWork};
pub(crate) use moe_decode::{MOE_DECODE_MAX_TOKENS, MOE_DECODE_WARPS};
pub use moe_gemm::{
    MoeGemm, MoeWork, MOE_INDEX_ONE_BLOCK_EXPERTS, MOE_INDEX_ONE_BLOCK_PAIRS, MOE_MAX_PAIRS,
};
pub use moe_mma::MOE_MMA_TILES;
pub use moe_route::{
    ExpertEpilogue, MoeExperts, MoeRoute, MoeRouteWork, MoeRouter, NormInto, NormRouteHow,
};
pub(crate) use moe_route::{
    MOE_MAX_USED, ROUTER_SMALL_MAX_EMBD, ROUTER_SMALL_N, ROUTE_CLUSTER_STAGE_BYTES,
};
pub use moe_slices::MoeSliceWork;
pub use norm_rope::{rope_table_len, NormRope, Rope, RopeArgs, RopeScale};
pub use quantize::{dequantize_blocks, ActQuant, Quantize, Q8_1_BLOCK_BYTES};

use crate::device::CudaDevice;
use crate::error::Result;
use ferrolm_gguf::GgmlType;

/// A format's suffix in kernel entry points (`mmvq_q4_k_n1`, `embed_f16`): ggml's type name,
/// lower-cased, so the table of supported types ([`formats`]) is the only list to keep.
fn kernel_suffix(ty: GgmlType) -> String {
    ty.name().to_ascii_lowercase()
}

/// Every kernel family, loaded (compiled on first use, else from the cubin cache).
pub struct Kernels {
    pub elementwise: Elementwise,
    pub norm_rope: NormRope,
    pub quantize: Quantize,
    pub mmvq: Mmvq,
    pub mmvq_mma: MmvqMma,
    pub mmvq_staged: MmvqStaged,
    pub matvec_f16: MatVecF16,
    pub mmq: Mmq,
    pub moe_gemm: MoeGemm,
    pub attention: Attention,
    pub attention_rows: AttentionRows,
    pub embed: Embed,
    pub gemm_f32: GemmF32,
    pub gemm_wgmma: GemmWgmma,
    pub moe_route: MoeRoute,
    pub moe_decode: MoeDecode,
    pub l2_ahead: L2Ahead,
}

impl Kernels {
    /// Every kernel, launched as `mode` says (the plan's [`crate::plan::Plan::launch_mode`]).
    pub fn load(dev: &CudaDevice, mode: launch::LaunchMode) -> Result<Self> {
        let launch = &launch::Launcher::new(dev.stream().clone(), mode);
        Ok(Self {
            elementwise: Elementwise::load(dev, launch)?,
            norm_rope: NormRope::load(dev, launch)?,
            quantize: Quantize::load(dev, launch)?,
            mmvq: Mmvq::load(dev, launch)?,
            mmvq_mma: MmvqMma::load(dev, launch)?,
            mmvq_staged: MmvqStaged::load(dev, launch)?,
            matvec_f16: MatVecF16::load(dev, launch)?,
            mmq: Mmq::load(dev, launch)?,
            moe_gemm: MoeGemm::load(dev, launch)?,
            attention: Attention::load(dev, launch)?,
            attention_rows: AttentionRows::load(dev, launch)?,
            embed: Embed::load(dev, launch)?,
            gemm_f32: GemmF32::load(dev, launch)?,
            gemm_wgmma: GemmWgmma::load(dev, launch)?,
            moe_route: MoeRoute::load(dev, launch)?,
            moe_decode: MoeDecode::load(dev, launch)?,
            l2_ahead: L2Ahead::load(dev)?,
        })
    }
}

/// Kernels take element counts as `int`: a larger buffer is a caller's bug.
fn int(n: usize, what: &str) -> i32 {
    i32::try_from(n).unwrap_or_else(|_| panic!("{what} = {n} does not fit a kernel's int"))
}

/// Blocks for a grid-stride loop over `n` elements: enough to fill the GPU, never zero.
fn stride_blocks(n: usize, threads: u32) -> u32 {
    (n.div_ceil(threads as usize)).clamp(1, 65_535) as u32
}

#[cfg(test)]
mod tests {
    use super::kernel_suffix;
    use ferrolm_gguf::GgmlType;

    /// The suffixes the `.cu` files instantiate (`MMVQ_FORMAT(q4_k, ...)`, `EMBED_INSTANCE(f16, ...)`).
    #[test]
    fn suffixes_match_the_kernel_instances() {
        for (ty, suffix) in [
            (GgmlType::F32, "f32"),
            (GgmlType::F16, "f16"),
            (GgmlType::Q4_0, "q4_0"),
            (GgmlType::Q4_1, "q4_1"),
            (GgmlType::Q5_0, "q5_0"),
            (GgmlType::Q5_1, "q5_1"),
            (GgmlType::Q8_0, "q8_0"),
            (GgmlType::Q4K, "q4_k"),
            (GgmlType::Q5K, "q5_k"),
            (GgmlType::Q6K, "q6_k"),
            (GgmlType::Mxfp4, "mxfp4"),
        ] {
            assert_eq!(kernel_suffix(ty), suffix);
        }
    }
}
