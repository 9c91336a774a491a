//! What the plan answers, as plain data: the launchers in `ops` take these as arguments and
//! launch what they say.

use crate::ops::{ActQuant, DecodeKernel, MmqOrder, PrefillKernel, MMQ_TILES};
use ferrolm_gguf::GgmlType;
use std::fmt;

/// How `out = x · Wᵀ` runs for `n` activation rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matmul {
    /// Weights held as f32 (float files, formats without an int8 kernel): `gemm_f32` on the
    /// f32 activations.
    Float,
    /// `mmvq`, every row in one launch; `wide`: the warp-per-row kernels.
    MatVec { wide: bool },
    /// The int8 GEMM (`mmq`).
    Gemm(Gemm),
    /// `mmvq_mma`, the tensor-core mat-vec of a batched decode step's 2-64 rows;
    /// `two_tiles`: 32 weight rows a warp (else 16).
    MatVecMma { two_tiles: bool },
    /// `mmvq_staged`, the tensor-core mat-vec with each super-block's activations in shared
    /// memory, for a batched decode step's 17-64 rows: mmq's arithmetic in `order`, k shared
    /// out `splits` ways.
    MatVecStaged { order: MmqOrder, splits: usize },
    /// `mmvq` over slices of its most rows: no GEMM for this format or width, or
    /// `FERROLM_CUDA_MMQ=0`.
    MatVecSlices { wide: bool },
}

/// How an `mmq` GEMM runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gemm {
    /// The CUDA-core kernel in the CPU's arithmetic (`mmq_small`: `mmq_{q8_0,q5_0}_lanes`,
    /// `mmq_{q4_0,q4_1,q5_1}_chain`): widths that are not whole k-steps, and short Q8_0 and
    /// Q5_0 ubatches.
    Small,
    /// The tensor-core tiles `MMQ_TILES[tile]`, one launch per `(first token, tokens, order)`
    /// (the [`MmqOrder::Blocks`] tail on its own 64×64 entry point).
    /// `splits` > 1: each tile's k steps shared by that many blocks (split-K), the shares
    /// added in a fixed order (within f32 rounding of `splits` 1; [`MmqOrder::Subs`] launches
    /// only).
    Tiles {
        tile: usize,
        launches: Vec<(usize, usize, MmqOrder)>,
        splits: usize,
    },
}

impl Gemm {
    /// The same launches on another tile (the same bits; `Small` stays itself).
    pub fn with_tile(self, tile: usize) -> Self {
        match self {
            Gemm::Small => Gemm::Small,
            Gemm::Tiles {
                launches, splits, ..
            } => Gemm::Tiles {
                tile,
                launches,
                splits,
            },
        }
    }

    /// The same launches with k split `splits` ways (`Small` stays itself).
    pub fn with_splits(self, splits: usize) -> Self {
        match self {
            Gemm::Small => Gemm::Small,
            Gemm::Tiles { tile, launches, .. } => Gemm::Tiles {
                tile,
                launches,
                splits,
            },
        }
    }

    /// Floats of the split-K scratch a GEMM of `n` × `rows` outputs needs (0 unsplit).
    pub fn scratch(&self, n: usize, rows: usize) -> usize {
        match self {
            Gemm::Tiles { splits, .. } if *splits > 1 => splits * n * rows,
            _ => 0,
        }
    }
}

impl fmt::Display for Gemm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gemm::Small => write!(f, "mmq_small"),
            Gemm::Tiles {
                tile,
                launches,
                splits,
            } => {
                write!(f, "mmq {}", MMQ_TILES[*tile].name)?;
                for (t0, n, order) in launches {
                    write!(f, " {order:?}[{t0}..{}]", t0 + n)?;
                }
                if *splits > 1 {
                    write!(f, " split-k {splits}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Matmul {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let walk = |wide: bool| if wide { "wide" } else { "narrow" };
        match self {
            Matmul::Float => write!(f, "gemm_f32"),
            Matmul::MatVec { wide } => write!(f, "mmvq ({})", walk(*wide)),
            Matmul::Gemm(g) => write!(f, "{g}"),
            Matmul::MatVecMma { two_tiles } => {
                write!(
                    f,
                    "mmvq_mma ({} rows a warp)",
                    if *two_tiles { 32 } else { 16 }
                )
            }
            Matmul::MatVecStaged { order, splits } => {
                write!(f, "mmvq_staged {order:?}")?;
                if *splits > 1 {
                    write!(f, " split-k {splits}")?;
                }
                Ok(())
            }
            Matmul::MatVecSlices { wide } => write!(f, "mmvq in 8-row slices ({})", walk(*wide)),
        }
    }
}

/// Which attention kernel runs a ubatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attn {
    /// Flash-decoding over the cache's splits; `fused_combine`: the splits may be combined
    /// in the split kernel's last block per head, where [`Plan::combine_in_walk`] says so
    /// (else in `attn_decode_combine`); `kernel`: a
    /// block per query head, or per KV head and split for all its query heads (on the tensor
    /// cores or not).
    Decode {
        fused_combine: bool,
        kernel: DecodeKernel,
    },
    /// A prefill kernel over the whole ubatch.
    Prefill(PrefillKernel),
}

/// Which kernel computes an MoE router's logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterLogits {
    /// `moe_logits_small`: a block per expert, for a few tokens.
    MatVec,
    /// `moe_route_small`: the same, and the top-k in the last block to finish (one launch).
    MatVecTopk,
    /// The f32 GEMM (the same bits), with [`Plan::gemm_f32_token_warps`](super::Plan::gemm_f32_token_warps)'s layout.
    Gemm { token_warps: usize },
}

/// What the MoE choice depends on: a ubatch's tokens and its layer's expert shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub tokens: usize,
    pub gate: GgmlType,
    pub up: GgmlType,
    pub down: GgmlType,
    pub n_embd: usize,
    pub n_ff: usize,
    /// Experts a token uses, of how many.
    pub n_used: usize,
    pub n_expert: usize,
}

impl MoeShape {
    /// The shape of `n` tokens through `experts`.
    pub fn new(experts: &crate::ops::MoeExperts, tokens: usize) -> Self {
        Self {
            tokens,
            gate: experts.gate.ty,
            up: experts.up.ty,
            down: experts.down.ty,
            n_embd: experts.n_embd(),
            n_ff: experts.n_ff,
            n_used: experts.n_used,
            n_expert: experts.n_expert,
        }
    }

    /// Experts held as floats (F32/F16/BF16 files, held as F32: the `float` formats of
    /// [`formats`](crate::ops::formats)).
    pub fn is_float(&self) -> bool {
        [self.gate, self.up, self.down]
            .iter()
            .all(|&t| crate::ops::formats::has(t, |f| f.float))
    }
}

/// How `moe_decode` runs a few tokens' experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertMatVec {
    /// The fused kernels (gate+up+SwiGLU, then down) rather than per-slot mat-vecs.
    pub fused: bool,
    /// Q4_K and Q6_K on the wide walk (else their `narrow_` entry points).
    pub wide: bool,
    /// How `x` is quantized for gate and up, and `h` for down.
    pub x_quant: ActQuant,
    pub h_quant: ActQuant,
    /// Warps a block of the fused gate/up kernel (1-8): only the blocks' size, not the bits.
    pub gate_up_warps: u32,
    /// The fused gate/up kernel asks L2 for its experts' down weights (sm_90): not the bits.
    pub down_prefetch: bool,
    /// At one token the fused gate/up launch also quantizes h for down (its last block a
    /// 256-row group) in place of a launch of its own: the same bits.
    pub h_in_gate_up: bool,
    /// Each warp of the fused kernels asks L1 for its rows before walking them (its walk
    /// waits on memory once a round otherwise): not the bits.
    pub rows_l1: bool,
    /// At one token (with `lean`; down with `down_direct`) the gate/up and the down kernels take
    /// their `tight_` entries: the lean shape in four blocks an SM (64 registers; down: one
    /// token's direct walk only, two steps of it in flight): not the bits.
    pub tight_gate_up: bool,
    pub tight_down: bool,
    /// At one token the down kernel asks for its rows before its wait for the kernel ahead
    /// (L1, or L2 with `bulk_l2`): not the bits.
    pub down_early: bool,
    /// At one token each warp asks L2 for its expert rows in one bulk request (sm_90): not
    /// the bits.
    pub bulk_l2: bool,
    /// At one token the down kernel deals each slot's rows straight to its warps, without
    /// the leader search over every slot's masks: the same bits.
    pub down_direct: bool,
    /// At one token each gate/up warp walks its slot straight away, without the members'
    /// masks: the same bits.
    pub gate_up_direct: bool,
    /// At one token the K-quants' experts take the `lean_` kernels: half the rows a warp,
    /// twice the warps, three blocks an SM (MXFP4's shape). Not the bits.
    pub lean: bool,
}

/// How `moe_gemm` runs a ubatch's experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGemm {
    /// Float experts: `moe_f32_gate_up` and `moe_f32_down` straight from the routes.
    Float,
    /// The int8 GEMMs: one launch for all experts (`grouped`) or one per expert, in these
    /// orders, on activations quantized so (the norm's blocks where it made them so). With
    /// `matvec_mma`, the tensor-core mat-vec (`moe_mma.cu`, column tiles of 8 pairs a pass) in
    /// place of the GEMM tiles, for all experts at once: the same bits as the grouped GEMM in
    /// [`MmqOrder::Subs`], its only order.
    Int8 {
        grouped: bool,
        x_quant: ActQuant,
        h_quant: ActQuant,
        gate_up: MmqOrder,
        down: MmqOrder,
        matvec_mma: Option<usize>,
        /// The expert-sorted index built by one block (`moe_index_one_block`) where the
        /// pairs are few: the same index as `moe_count` and `moe_scatter`, one launch.
        index_one_block: bool,
    },
}

impl ExpertGemm {
    /// The same GEMMs, in one launch for all experts or one per expert (float: itself).
    pub fn with_grouped(self, grouped: bool) -> Self {
        self.with_int8(|g, _| *g = grouped)
    }

    /// The same products on the tensor-core mat-vec with `tiles` column tiles, or (`None`) on
    /// the GEMM tiles (float: itself).
    pub fn with_matvec_mma(self, tiles: Option<usize>) -> Self {
        self.with_int8(|_, m| *m = tiles)
    }

    /// The same GEMMs with the experts' index built by one block, or by two launches (float:
    /// itself).
    pub fn with_index_one_block(mut self, one: bool) -> Self {
        if let ExpertGemm::Int8 {
            index_one_block, ..
        } = &mut self
        {
            *index_one_block = one;
        }
        self
    }

    fn with_int8(mut self, f: impl FnOnce(&mut bool, &mut Option<usize>)) -> Self {
        if let ExpertGemm::Int8 {
            grouped,
            matvec_mma,
            ..
        } = &mut self
        {
            f(grouped, matvec_mma);
        }
        self
    }
}

/// Which MoE path a ubatch takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoePath {
    /// `moe_decode` (a few tokens).
    MatVec(ExpertMatVec),
    /// `moe_decode` over slices of its most tokens, for int8 experts the GEMM does not take
    /// (`n_embd` or `n_ff` not a multiple of 256: the shape-space goldens' 64 and 96, say).
    MatVecSlices(ExpertMatVec),
    /// `moe_gemm`.
    Gemm(ExpertGemm),
    /// The f16 warpgroup-MMA GEMMs, grouped by expert (`gemm_wgmma.cu`): long ubatches on
    /// Hopper.
    F16,
}
