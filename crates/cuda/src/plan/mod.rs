//! The CUDA backend's kernel plan: one value, built once from the device (SM count, compute
//! capability, how many blocks of each GEMM tile an SM holds) and the environment's switches,
//! that answers every "which kernel runs this shape" question the launchers used to answer
//! themselves. The launchers in `ops` take its answers ([`Matmul`], [`Gemm`], [`Attn`],
//! [`MoePath`], [`RouterLogits`], [`ActQuant`]) as arguments and launch what they are told.
//!
//! Kernel-compiled limits (rows one mat-vec launch takes, tokens of the MoE decode kernels,
//! the GEMM tile shapes, widths the router's row kernel stages) stay next to their launchers;
//! the thresholds that are choices live here. docs/architecture.md has the table of what runs
//! when. The answers are grouped by concern: `matmul.rs` (products), `attention.rs` and
//! `moe.rs`; the pass-wide ones (fusions, graphs, logits) are below.

mod answers;
mod attention;
mod matmul;
mod moe;
mod switches;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_attention;
#[cfg(test)]
mod tests_f32kv;
#[cfg(test)]
mod tests_matmul;
#[cfg(test)]
mod tests_moe;
#[cfg(test)]
mod tests_mxfp4;

pub use answers::{Attn, ExpertGemm, ExpertMatVec, Gemm, Matmul, MoePath, MoeShape, RouterLogits};
pub use matmul::{auto_tile, split_ways};
pub use switches::{tile_from_env, Switches};

use crate::device::CudaDevice;
use crate::error::Result;
use crate::ops::launch::LaunchMode;
use crate::ops::{
    formats, ActQuant, AttentionRows, DecodeKernel, GemmWgmma, Kernels, KvFormat, L2AheadForm,
    L2AheadHow, MatVecF16, Mmq, MmqOrder, Mmvq, MmvqMma, MmvqStaged, MoeDecodeWork, MoeGemm,
    PrefillKernel, ATTN_GROUPS, ATTN_MAX_SPLITS, F16_DECODE_MAX_ROWS, F16_MATVEC_MAX_ROWS,
    F16_MATVEC_SPLIT_BLOCKS, MMA_HEAD_DIMS, MMA_MV_MAX_ROWS, MMQ_MAX_SPLITS, MMQ_SPLIT_TILES,
    MMQ_TILES, MMVQ_MAX_COLS, MOE_DECODE_MAX_TOKENS, MOE_DECODE_WARPS, MOE_INDEX_ONE_BLOCK_EXPERTS,
    MOE_INDEX_ONE_BLOCK_PAIRS, ROUTER_SMALL_MAX_EMBD, ROUTER_SMALL_N, ROUTE_CLUSTER_STAGE_BYTES,
    STAGED_MAX_ROWS, STAGED_MIN_ROWS, STAGED_SPLIT_BLOCKS,
};
use ferrolm_gguf::GgmlType;
use std::fmt;

/// Ubatches of fewer rows run prefill in the CPU's arithmetic where a kernel offers it
/// (attention's f32 order, Q8_0's eight lanes, Q4_K's integer scales: the CPU's bits, which
/// keeps the tiny goldens' figures the CPU's); from this many rows the tensor-core kernels take
/// over, within f32 rounding of the CPU. Short ubatches cost little beside the whole prompt;
/// long ones are where the speed is.
pub const CPU_ORDER_MAX_ROWS: usize = 256;

/// From this many query rows prefill takes the tensor-core kernel: below, the ubatch is short
/// enough that attention in the CPU's arithmetic costs little beside its GEMMs, and it keeps the
/// backends' results the same (the tiny goldens' 115-token passes differ in every layer on the
/// tensor-core kernel's f16 Q and P).
pub const REF_MAX_ROWS: usize = CPU_ORDER_MAX_ROWS;

/// Below this many query rows a short ubatch runs ggml's CPU arithmetic (as llama.cpp's CPU and
/// ferrolm's do below 64 rows), where the tensor-core kernel's f16 rounding of Q and P had moved
/// the tiny q8_0 goldens from 181-183/185 to 178-179/185 top-1 on the H200.
pub const GGML_SMALL_ROWS: usize = 64;

/// From this many rows a product may take the f16 warpgroup-MMA GEMM ([`Plan::f16_gemm`]):
/// its weight expansion (a pass over the whole matrix) is repaid only by many tokens, and
/// shorter ubatches keep the CPU's arithmetic where they owe it.
pub const F16_GEMM_MIN_ROWS: usize = CPU_ORDER_MAX_ROWS;

/// The fewest rows of a batched decode step whose Q4_K products take the f16 GEMM with the
/// weight unpacked in it ([`Plan::f16_decode`]); fewer stay on the tensor-core mat-vec, which
/// reads each weight into MMA fragments for all rows without a shared-memory stage. Padded
/// steps come in powers of two: on the H200 (docs/perf.md, session 23) qwen3-8b's 64-row
/// steps ran 3,022-3,041 t/s with it against 2,740-2,749 without, its 32-row steps 2,592
/// against 2,663 and its 16-row steps 1,828 against 2,115.
pub const F16_DECODE_MIN_ROWS: usize = 48;

/// The fewest super-blocks a share of [`Plan::f16_decode`]'s split takes. On the H200
/// (docs/perf.md, session 23) qwen3-8b's gate and up (two shares of 8 super-blocks) ran a
/// 64-sequence step's products in 4.4 ms against the tensor-core mat-vec's 7.3, while its
/// q, k, v, o and down (shares of 2-6) ran 14.0 ms against 10.2. Since then the kernel
/// unpacks in f16 arithmetic: at 6, down's 8 shares of 6 take it too (session 44 on the H100:
/// S_TG at 64 sequences 6,578 t/s against 6,508 at 8; level at 32).
pub const F16_DECODE_MIN_SHARE_BLOCKS: usize = 6;

/// The fewest rows of a batched decode step whose products take the staged tensor-core
/// mat-vec ([`Plan::staged_matvec`], `FERROLM_MMVQ_MMA_STAGED`): from five column tiles, where
/// `mmvq_mma`'s activation loads became most of its work (docs/perf.md, session 13).
pub const STAGED_DEFAULT_ROWS: usize = 33;

/// The fewest rows of a batched decode step whose Q4_K and Q6_K products take the f16 mat-vec
/// ([`Plan::f16_matvec`], `FERROLM_F16_MATVEC`), for rows of at least
/// [`F16_MATVEC_WIDE_COLS`] elements: on the H100 (docs/perf.md, session 30) qwen3-8b's
/// 32-sequence steps ran 19% faster from 17 rows (3,507 against 2,955 t/s).
pub const F16_MATVEC_DEFAULT_ROWS: usize = 17;

/// The fewest rows it takes for narrower products: olmoe-1b-7b's 2048-wide ones lost 3% at 32
/// sequences from 17 rows (7,836 against 8,043 t/s) and gained 13% at 64.
pub const F16_MATVEC_NARROW_ROWS: usize = 33;

/// Row width from which [`F16_MATVEC_DEFAULT_ROWS`] applies.
pub const F16_MATVEC_WIDE_COLS: usize = 4096;

/// The fewest pairs an expert, on average, for which a ubatch's experts take the f16 GEMMs
/// ([`Plan::f16_experts`]): every expert's weights are expanded each time, which few pairs do
/// not repay. On the H200 (docs/perf.md, session 18) Qwen3-30B-A3B (128 experts, top-8) at 512
/// tokens (32 pairs an expert) ran 9,192 t/s on them against 10,622 on the int8 GEMM, and at
/// 1,024 (64) 15,283 against 12,781; OLMoE (64 experts) at 512 (64) 36,197 against 30,843.
pub const F16_EXPERTS_MIN_PAIRS: usize = 64;

/// [`F16_EXPERTS_MIN_PAIRS`] where gate and up are Q4_K, unpacked in the GEMM
/// ([`Plan::f16_unpack`]): nothing to repay but the f16 path's gather and SwiGLU. On the H200
/// (docs/perf.md, session 19) Qwen3-30B-A3B at 512 tokens (32 pairs an expert) ran 12,797 t/s
/// on them against 11,466 on the int8 GEMM, and at 256 tokens (16) 7,436 against 6,888.
pub const F16_UNPACKED_EXPERTS_MIN_PAIRS: usize = 16;

/// Q8_0 and Q5_0 GEMMs of fewer rows take the eight-lane kernels (the CPU's bits, at about a
/// quarter of the tensor-core GEMM's speed on the H200 for Q8_0: affordable for short ubatches
/// only).
pub const LANES_MAX_TOKENS: usize = CPU_ORDER_MAX_ROWS;

/// Ubatches of up to this many rows take the mat-vec kernels and flash-decoding (the decode
/// work buffers are sized for it): all the rows one mat-vec launch takes.
pub const DECODE_MAX_ROWS: usize = MMVQ_MAX_COLS;
/// The most pairs an expert, on average, of a ubatch whose experts take the tensor-core
/// mat-vec ([`Plan::expert_mma_tiles`]): OLMoE's (top-8 of 64) up to 16 tokens. On the H200
/// (docs/perf.md, session 14) it gave 8 tokens 1.78× the decode kernels' speed and 16 level,
/// but lost to the grouped GEMM at 32 and 64 tokens (4 and 8 pairs an expert): 0.92×, 0.75×.
pub const MOE_MMA_MAX_PAIRS: usize = 2;

/// The most tokens whose norm runs in the router's launch ([`Plan::norm_route`]). Each of
/// that launch's blocks (one an expert) takes every token's norm in turn: at 8 tokens it took
/// 30.6 µs a layer on qwen3-30b-a3b (ncu, session 27), where the norm's own launch takes 5.
pub const NORM_ROUTE_MAX_ROWS: usize = 1;
/// Blocks of that launch's cluster ([`Plan::norm_route_cluster`], off by default): the most a
/// cluster may have on any sm_90 part. Session 34 measured the launch of a block an expert at
/// 10.6 µs of a qwen3-30b-a3b layer's chain and the cluster launch at 15.4 (H100,
/// `tools/device/chain_costs.sh`): 8 SMs load the router's 1 MB where 128 did.
pub const ROUTE_CLUSTER_BLOCKS: usize = 8;
/// Warps a block of the MoE decode gate/up kernel at one token (8 otherwise). Its blocks hold
/// 128 registers a thread, so an SM takes 16 warps: qwen3-30b-a3b's 192 blocks of 8 warps (768
/// rows, top-8) left 60 of the H100's 132 SMs two blocks and the rest one, where 384 blocks of 4
/// put three on the busiest SMs against 2.9 on average. OLMoE's 1024 rows give 256 blocks of 8
/// either way evenly. A warp's rows and walk stay the same: the same bits.
pub const MOE_GATE_UP_WARPS_ONE: u32 = 4;
/// Decode attention's blocks an SM, when the context is long enough to give them work.
pub const DECODE_BLOCKS_PER_SM: usize = 4;
/// The fewest keys a flash-decoding split takes at full context.
pub const DECODE_MIN_SPLIT_KEYS: usize = 128;
/// A short context's splits: up to [`DECODE_SHORT_SPLITS`] of at least this many keys. Its
/// attention is a latency chain per block, so one split of 128 keys left most SMs idle: four
/// gave tg128 (a 128-position cache) +3.7% on qwen3-8b, +1-3% on olmoe-1b-7b and +2-3% on
/// gpt-oss-20b (window 128) on the H200, where 32-key splits at a 4k context lost 4% against
/// 128-key ones (docs/perf.md, session 20).
pub const DECODE_SHORT_SPLIT_KEYS: usize = 32;
/// See [`DECODE_SHORT_SPLIT_KEYS`].
pub const DECODE_SHORT_SPLITS: usize = 4;

/// The fewest k steps ([`MMQ_BK`](crate::ops::MMQ_BK) columns) a split-K share takes: a share's first step has no
/// copy in flight to hide behind.
pub const SPLIT_MIN_STEPS: usize = 2;

/// Keys a split of the batched decode attention takes ([`Plan::rows_splits`]): one warp's
/// pass. Short rows are then spread over many blocks rather than walked by few: OLMoE's 8 and
/// 64 sequences at 128-256 keys ran 5-9% faster a step than at 256 keys a split (docs/perf.md,
/// "Issue 16: the paged KV cache").
pub const ROWS_SPLIT_KEYS: usize = 32;

/// Positions a block of the paged KV cache ([`Plan::kv_block`]): a multiple of the flash
/// prefill's 64-key tiles, so a tile reads one block; a sequence wastes under one block.
pub const KV_BLOCK: usize = 64;

/// The largest multi-sequence decode step captured as a graph ([`Plan::batch_graph_size`]).
pub const BATCH_GRAPH_MAX: usize = 256;

/// Tile shapes of the GEMM.
const TILES: usize = MMQ_TILES.len();

/// What the plan needs of the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Multiprocessors.
    pub sms: usize,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Blocks of each [`MMQ_TILES`] shape one SM holds, per GEMM format (0: the tile does not
    /// fit this device); a format not listed fits none.
    pub mmq_blocks_per_sm: Vec<(GgmlType, [u32; TILES])>,
    /// The f16 warpgroup-MMA GEMM runs here (Hopper, and its shared memory fits).
    pub f16_gemm: bool,
}

impl DeviceFacts {
    /// Read from the device and its loaded GEMM kernels.
    pub fn read(dev: &CudaDevice, k: &Kernels) -> Result<Self> {
        Ok(Self {
            sms: dev.sm_count()?,
            cc: dev.compute_capability(),
            mmq_blocks_per_sm: k.mmq.blocks_per_sm(),
            f16_gemm: k.gemm_wgmma.available(),
        })
    }
}

/// The weight prefetch's limit where `FERROLM_CUDA_PREFETCH_MAX_MB` is `auto`: the matrices of
/// at most 5 MB (qwen3-30b-a3b's o, OLMoE's attention, qwen3-8b's k and v). Session 45 (H100):
/// tg128 +2.0% on qwen3-30b-a3b, +1.6% on OLMoE, level on qwen3-8b, where 16 MB (qwen3-8b's q
/// and o too) lost 1.5% on qwen3-8b and every matrix 2.6% (session 38).
pub const PREFETCH_MAX_MB_AUTO: usize = 5;

/// Programmatic dependent launch on Hopper (sm_90) and later, unless `FERROLM_CUDA_PDL=0`; the
/// weight prefetch with it for the matrices up to `FERROLM_CUDA_PREFETCH_MAX_MB` alone
/// ([`PREFETCH_MAX_MB_AUTO`]; 0: none), or for every matrix where `FERROLM_CUDA_PREFETCH` or
/// `_L1` asks.
fn launch_mode(switches: &Switches, cc: (i32, i32)) -> LaunchMode {
    let dependent = switches.pdl && cc.0 >= 9;
    let every = switches.prefetch || switches.prefetch_l1;
    let max_mb = switches.prefetch_max_mb.unwrap_or(PREFETCH_MAX_MB_AUTO);
    let weight_prefetch = dependent && (every || max_mb > 0);
    LaunchMode {
        dependent,
        weight_prefetch,
        weight_prefetch_l1: switches.prefetch_l1,
        weight_prefetch_max: if weight_prefetch && !every {
            max_mb << 20
        } else {
            0
        },
        stage_activations: switches.stage,
        head_norm_regs: switches.head_norm_regs,
        norm_exact: switches.norm_exact,
        carveout: switches.carveout.map(|c| c as i32),
        // Leaked once a process where set: a launch mode is a plain copyable value.
        skip: if switches.timing_skip.is_empty() {
            &[]
        } else {
            Box::leak(switches.timing_skip.clone().into_boxed_slice())
        },
    }
}

/// Every kernel choice of the CUDA backend; see the module header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    switches: Switches,
    device: DeviceFacts,
    /// The plan of passes of several sequences ([`Plan::for_sequence_batches`]).
    sequence_batches: bool,
}
impl Plan {
    pub fn new(switches: Switches, device: DeviceFacts) -> Self {
        Self {
            switches,
            device,
            sequence_batches: false,
        }
    }

    /// `dev`'s kernels and the plan for them, under the process environment's switches. The
    /// switches come first, so that a bad value fails before any kernel is compiled; the way
    /// kernels are launched is fixed as they load.
    pub fn load(dev: &CudaDevice) -> Result<(Kernels, Self)> {
        let switches = Switches::from_env()?;
        let k = Kernels::load(dev, launch_mode(&switches, dev.compute_capability()))?;
        let plan = Self::new(switches, DeviceFacts::read(dev, &k)?);
        Ok((k, plan))
    }

    /// How kernels start (`ops/launch.rs`): programmatic dependent launch, and the mat-vecs'
    /// weight prefetch under it.
    pub fn launch_mode(&self) -> LaunchMode {
        launch_mode(&self.switches, self.device.cc)
    }

    pub fn switches(&self) -> &Switches {
        &self.switches
    }

    pub fn device(&self) -> &DeviceFacts {
        &self.device
    }

    /// The plan for passes of several sequences (a batched decode step, or decode rows beside
    /// a prompt): their GEMMs take the tensor-core orders at any size, where a pass of one
    /// sequence keeps the CPU's arithmetic under [`CPU_ORDER_MAX_ROWS`] rows (the CPU-order
    /// kernels run at a fraction of the speed: 32 sequences of qwen3-8b decoded at 461 t/s
    /// against llama.cpp's 3,035). Their contract is the long prompts' (within f32 rounding
    /// of the CPU, `cuda-parity`); `FERROLM_CUDA_INT_SCALES=1` still forces the CPU's order.
    pub fn for_sequence_batches(&self) -> Plan {
        let mut p = self.clone();
        p.switches.int_scales = Some(self.switches.int_scales.unwrap_or(false));
        p.switches.q8_0_lanes = false;
        p.sequence_batches = true;
        p
    }

    /// The decode fusions: norm+quantize, paired mat-vecs, SwiGLU in the mat-vec, q/k
    /// norm+RoPE, RoPE of q and k in one launch, biases in the mat-vec (all bit-identical to
    /// the separate kernels).
    pub fn fuse(&self) -> bool {
        self.switches.fuse
    }

    /// Whether a mat-vec adds its outputs' bias in its own launch (the q/k/v and attention
    /// output biases), bit-identical to an add_bias after it.
    pub fn bias_in_matvec(&self) -> bool {
        self.switches.fuse
    }

    /// Whether a pass's rotations read one RoPE table made once a pass (bit-identical to each
    /// computing its own angles).
    pub fn rope_table(&self) -> bool {
        self.switches.rope_table
    }

    /// Whether a norm over rows of `width` runs fused with its activation quantization.
    pub fn fused_norm(&self, width: usize) -> bool {
        self.switches.fuse && width.is_multiple_of(32)
    }

    /// Whether one token's q/k pair takes v's mat-vec into its launch (`FERROLM_QKV_ONE`, on by
    /// default; a decode fusion: off under `FERROLM_CUDA_FUSE=0`), where `Mmvq::triple` has a kernel.
    pub fn qkv_one(&self, rows: usize) -> bool {
        self.switches.qkv_one && self.pair_matvec(rows)
    }

    /// Whether the attention's norm joins that q/k/v launch (`FERROLM_NORM_IN_QKV`, off by
    /// default), where `Mmvq::norm_triple` has a kernel for the row's width.
    pub fn norm_in_qkv(&self, rows: usize) -> bool {
        self.switches.norm_in_qkv && self.qkv_one(rows)
    }

    /// Whether the FFN's norm joins one token's SwiGLU gate/up launch (`FERROLM_NORM_IN_GLU`,
    /// off by default), where `Mmvq::norm_glu` has a kernel for the format and width.
    pub fn norm_in_glu(&self, rows: usize) -> bool {
        self.switches.norm_in_glu && self.pair_matvec(rows)
    }

    /// Whether two mat-vecs of one format over `rows` activation rows share a launch.
    pub fn pair_matvec(&self, rows: usize) -> bool {
        self.switches.fuse && rows == 1
    }

    /// Whether decode steps may be captured and replayed as CUDA graphs (the runner also
    /// needs no debug dumps): not while profiling, whose events a capture cannot hold.
    pub fn graphs(&self) -> bool {
        self.switches.graphs && !self.switches.profile
    }

    /// The L2 prefetch beside a captured one-token step, and how it asks (`FERROLM_L2_AHEAD`;
    /// backend/l2_ahead.rs): off by default.
    pub fn l2_ahead(&self) -> Option<L2AheadHow> {
        let form = match self.switches.l2_ahead {
            1 => L2AheadForm::Lines,
            2 => L2AheadForm::Bulk,
            3 => L2AheadForm::Dry,
            _ => return None,
        };
        Some(L2AheadHow {
            form,
            blocks: self.switches.l2_ahead_blocks as u32,
        })
    }

    /// Stage timing from CUDA events (`FERROLM_CUDA_PROFILE`).
    pub fn profile(&self) -> bool {
        self.switches.profile
    }

    /// Whether a pass's logits come to the host through page-locked memory
    /// (`FERROLM_PINNED_LOGITS`, on by default; `=0`: pageable).
    pub fn pinned_logits(&self) -> bool {
        self.switches.pinned_logits
    }

    /// Whether a pass that wants only each logit row's greedy choice picks it on the GPU
    /// (`FERROLM_GREEDY_ON_DEVICE=1`; off by default until checked on the device). Contract:
    /// the host's picks from the same logits, exactly (compares only).
    pub fn greedy_on_device(&self) -> bool {
        self.switches.greedy_on_device
    }

    /// The batch size a multi-sequence decode step of `n` sequences is padded to and captured
    /// at as a CUDA graph (one graph per size), or `None` when such steps run op by op: a
    /// power of two from 2 up to [`BATCH_GRAPH_MAX`], so a handful of graphs serve every
    /// batch; padding rows cost their share of the row-wise ops and nothing in attention.
    pub fn batch_graph_size(&self, n: usize) -> Option<usize> {
        (self.graphs() && self.switches.attn_batched && (2..=BATCH_GRAPH_MAX).contains(&n))
            .then(|| n.next_power_of_two())
    }

    /// Whether one token of one sequence takes its per-head q/k norms, NEOX rotation and KV
    /// store in the tensor-core decode walk's launch (`FERROLM_ATTN_ROPE`, a decode fusion:
    /// off under `FERROLM_CUDA_FUSE=0`), where the model and cache let it
    /// (`DecodeRotation::takes`).
    pub fn attn_rope(&self) -> bool {
        self.switches.fuse && self.switches.attn_rope
    }

    /// Whether [`Self::attn_rope`] also takes whole-row q/k norms (OLMoE's) on the group block
    /// (`FERROLM_ATTN_ROPE_ROWS`; on).
    pub fn attn_rope_rows(&self) -> bool {
        self.attn_rope() && self.switches.attn_rope_rows
    }

    /// Whether the rotating tensor-core walk takes a KV head's 8 query heads in two blocks of
    /// 4 (`FERROLM_ATTN_HEAD_SPLIT`; on).
    pub fn attn_head_split(&self) -> bool {
        self.switches.attn_head_split
    }

    /// Whether the whole-row rotating walk takes its tiles by bulk copies
    /// (`FERROLM_ATTN_BULK`; sm_90 only). Contract: the same bits.
    pub fn attn_bulk(&self) -> bool {
        self.switches.attn_bulk && self.device.cc.0 >= 9
    }

    /// Whether one sequence's rotation of q and k also stores its keys and values in the
    /// cache (`FERROLM_ROPE_STORE`, a decode fusion: off under `FERROLM_CUDA_FUSE=0`), where
    /// the cache's format lets it (`NormRope::rope_qk_store`).
    pub fn rope_store(&self) -> bool {
        self.switches.fuse && self.switches.rope_store
    }
}

/// The device, then one line per switch, then the thresholds.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.device;
        writeln!(f, "device: {} SMs, cc {}.{}", d.sms, d.cc.0, d.cc.1)?;
        write!(f, "{}", self.switches)?;
        writeln!(
            f,
            "rows: mat-vec and decode attention <= {DECODE_MAX_ROWS}, MoE decode <= \
             {MOE_DECODE_MAX_TOKENS}, ggml attention < {GGML_SMALL_ROWS}, CPU order < \
             {CPU_ORDER_MAX_ROWS}"
        )
    }
}
