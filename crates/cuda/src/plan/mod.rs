//! The CUDA backend's kernel plan: one value, built once from the device (SM count, compute
//! capability, how many blocks of each GEMM tile an SM holds) and the environment's switches,
//! that answers every "which kernel runs this shape" question the launchers used to answer
//! themselves. The launchers in `ops` take its answers ([`Matmul`], [`Gemm`], [`Attn`],
//! [`MoePath`], [`RouterLogits`], [`ActQuant`]) as arguments and launch what they are told.
//!
//! Kernel-compiled limits (rows one mat-vec launch takes, tokens of the MoE decode kernels,
//! the GEMM tile shapes, widths the router's row kernel stages) stay next to their launchers;
//! the thresholds that are choices live here. docs/architecture.md has the table of what runs
//! when.

mod answers;
mod switches;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_attention;
#[cfg(test)]
mod tests_f32kv;
#[cfg(test)]
mod tests_mxfp4;

pub use answers::{Attn, ExpertGemm, ExpertMatVec, Gemm, Matmul, MoePath, MoeShape, RouterLogits};
pub use switches::{tile_from_env, Switches};

use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::ops::launch::LaunchMode;
use crate::ops::{
    formats, ActQuant, AttentionRows, GemmWgmma, Kernels, KvFormat, Mmq, MmqOrder, Mmvq, MmvqMma,
    MmvqStaged, MoeDecodeWork, MoeGemm, PrefillKernel, ATTN_GROUPS, ATTN_MAX_SPLITS,
    F16_DECODE_MAX_ROWS, MMA_HEAD_DIMS, MMA_MV_MAX_ROWS, MMQ_MAX_SPLITS, MMQ_SPLIT_TILES,
    MMQ_TILES, MMVQ_MAX_COLS, MOE_DECODE_MAX_TOKENS, MOE_INDEX_ONE_BLOCK_EXPERTS,
    MOE_INDEX_ONE_BLOCK_PAIRS, ROUTER_SMALL_MAX_EMBD, ROUTER_SMALL_N, STAGED_MAX_ROWS,
    STAGED_MIN_ROWS, STAGED_SPLIT_BLOCKS,
};
use cudarc::driver::sys::CUdevice_attribute;
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
/// q, k, v, o and down (shares of 2-6) ran 14.0 ms against 10.2.
pub const F16_DECODE_MIN_SHARE_BLOCKS: usize = 8;

/// The fewest rows of a batched decode step whose products take the staged tensor-core
/// mat-vec ([`Plan::staged_matvec`], `FERROLM_MMVQ_STAGED`): from five column tiles, where
/// `mmvq_mma`'s activation loads became most of its work (docs/perf.md, session 13).
pub const STAGED_DEFAULT_ROWS: usize = 33;

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

/// Guessed relative speed of a full SM on each tile shape of [`MMQ_TILES`] (larger tiles
/// reuse each loaded fragment more); to be replaced by the H200 figures of
/// `cuda-parity --time`.
const TILE_SPEED: [f64; TILES] = [1.0, 0.85, 0.75, 0.75];

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
        let sms = dev
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .during("reading the SM count")? as usize;
        Ok(Self {
            sms,
            cc: dev.compute_capability(),
            mmq_blocks_per_sm: k.mmq.blocks_per_sm(),
            f16_gemm: k.gemm_wgmma.available(),
        })
    }
}

/// Programmatic dependent launch on Hopper (sm_90) and later, unless `FERROLM_CUDA_PDL=0`; the
/// weight prefetch with it, unless `FERROLM_CUDA_PREFETCH=0`.
fn launch_mode(switches: &Switches, cc: (i32, i32)) -> LaunchMode {
    let dependent = switches.pdl && cc.0 >= 9;
    LaunchMode {
        dependent,
        weight_prefetch: dependent && switches.prefetch,
        stage_activations: switches.stage,
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

    /// Whether two mat-vecs of one format over `rows` activation rows share a launch.
    pub fn pair_matvec(&self, rows: usize) -> bool {
        self.switches.fuse && rows == 1
    }

    /// Whether decode steps may be captured and replayed as CUDA graphs (the runner also
    /// needs no debug dumps): not while profiling, whose events a capture cannot hold.
    pub fn graphs(&self) -> bool {
        self.switches.graphs && !self.switches.profile
    }

    /// Stage timing from CUDA events (`FERROLM_CUDA_PROFILE`).
    pub fn profile(&self) -> bool {
        self.switches.profile
    }

    /// How activations meeting `ty` weights of `cols` columns are quantized: as llama.cpp's
    /// CPU pairs them, Q8_K for K-quants (rows of whole 256-blocks), Q8_1 otherwise.
    pub fn act_quant(&self, ty: GgmlType, cols: usize) -> ActQuant {
        let k_quant = matches!(
            ty,
            GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K
        );
        if k_quant && cols.is_multiple_of(256) && self.switches.q8k {
            ActQuant::Q8K
        } else {
            ActQuant::Q8_1
        }
    }

    /// The product of `n` activation rows with `ty` weights of `rows` × `cols`: in a pass of
    /// several sequences, the tensor-core mat-vec for 2-64 rows where the format has it
    /// ([`Plan::mma_matvec`]); else mat-vec up to [`DECODE_MAX_ROWS`] rows, the GEMM above
    /// where the format and width have one, mat-vec slices otherwise.
    pub fn matmul(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Matmul {
        let wide = self.matvec_wide(ty);
        if ty == GgmlType::F32 {
            Matmul::Float
        } else if let Some((order, splits)) = self.staged_matvec(ty, rows, cols, n) {
            Matmul::MatVecStaged { order, splits }
        } else if let Some(two_tiles) = self.mma_matvec(ty, cols, n) {
            Matmul::MatVecMma { two_tiles }
        } else if n <= DECODE_MAX_ROWS {
            Matmul::MatVec { wide }
        } else if self.switches.mmq && Mmq::supports(ty, cols) {
            Matmul::Gemm(self.gemm(ty, rows, cols, n))
        } else {
            Matmul::MatVecSlices { wide }
        }
    }

    /// Whether the experts of `s` take the f16 warpgroup-MMA GEMMs (`FERROLM_GEMM_F16`,
    /// Hopper): as [`Plan::f16_gemm`] for each of gate, up and down, with at least
    /// [`F16_EXPERTS_MIN_PAIRS`] pairs an expert on average ([`F16_UNPACKED_EXPERTS_MIN_PAIRS`]
    /// where gate and up are unpacked; `FERROLM_F16_EXPERTS_PAIRS`), and within the grouped
    /// scratch's pairs and widths. gpt-oss's biases and swiglu_oai go in the SwiGLU and
    /// unsort kernels around the GEMMs.
    pub fn f16_experts(&self, s: &MoeShape) -> bool {
        // FERROLM_MOE_GROUPED=0 (the per-expert launches, for bisecting) stays on the int8 GEMM.
        self.switches.moe_grouped
            && !s.is_float()
            && s.tokens * s.n_used >= self.f16_experts_min_pairs(s) * s.n_expert
            && s.tokens * s.n_used <= crate::ops::MOE_MAX_PAIRS
            // Its index and combine are the grouped GEMM's, whose scratch wants these widths.
            && MoeGemm::supports_widths(s.gate, s.down, s.n_embd, s.n_ff)
            && self.f16_gemm(s.gate, s.n_ff, s.n_embd, s.tokens)
            && self.f16_gemm(s.up, s.n_ff, s.n_embd, s.tokens)
            && self.f16_gemm(s.down, s.n_embd, s.n_ff, s.tokens)
    }

    /// Whether the f16 experts' GEMM unpacks `ty` weights itself ([`GemmWgmma::unpacks`]:
    /// Q4_K) rather than multiplying an f16 copy expanded first (`FERROLM_GEMM_F16_UNPACK`):
    /// the same bits, without a pass over every expert's weights into memory and back. Dense
    /// products are always expanded: each of their token tiles would unpack the weight again,
    /// which on the H200 (docs/perf.md, session 19) made Qwen3-30B-A3B's attention products
    /// 1.45× slower than expanding once at 2,048 tokens and 1.56× at 512.
    pub fn f16_unpack(&self, ty: GgmlType) -> bool {
        self.switches.gemm_f16_unpack && GemmWgmma::unpacks(ty)
    }

    /// Whether the f16 experts' GEMMs unpack gate and up (both), and down, themselves
    /// ([`Plan::f16_unpack`]).
    pub fn f16_experts_unpack(&self, x: &crate::ops::MoeExperts) -> [bool; 2] {
        [
            self.f16_unpack(x.gate.ty) && self.f16_unpack(x.up.ty),
            self.f16_unpack(x.down.ty),
        ]
    }

    /// The fewest pairs an expert, on average, for the f16 experts' GEMMs: fewer where gate
    /// and up are unpacked in the GEMM (no expansion to repay), unless
    /// `FERROLM_F16_EXPERTS_PAIRS` says.
    fn f16_experts_min_pairs(&self, s: &MoeShape) -> usize {
        let unpacked = self.f16_unpack(s.gate) && self.f16_unpack(s.up);
        self.switches.f16_experts_pairs.unwrap_or(if unpacked {
            F16_UNPACKED_EXPERTS_MIN_PAIRS
        } else {
            F16_EXPERTS_MIN_PAIRS
        })
    }

    /// Whether `n` rows of a `ty` product of `rows` × `cols` take the f16 warpgroup-MMA GEMM
    /// (`FERROLM_GEMM_F16`, Hopper): ubatches of [`F16_GEMM_MIN_ROWS`] rows or more, held to
    /// its contract (`ops/gemm_wgmma/`), for formats with an f16 expansion. In a pass of
    /// several sequences only past [`BATCH_GRAPH_MAX`] rows: a decode step of up to that many
    /// sequences (padded to a power of two) would expand every weight, the output's too, each
    /// step. A forced CPU order (`FERROLM_CUDA_INT_SCALES=1`) stays forced.
    pub fn f16_gemm(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> bool {
        let min = if self.sequence_batches {
            BATCH_GRAPH_MAX + 1
        } else {
            F16_GEMM_MIN_ROWS
        };
        self.switches.gemm_f16
            && self.device.f16_gemm
            && self.switches.int_scales != Some(true)
            && n >= min
            && GemmWgmma::supports(ty, rows, cols)
    }

    /// Whether `n` rows of a batched decode step's `ty` product of `rows` × `cols` take the
    /// f16 GEMM with the weight unpacked in it (`FERROLM_F16_DECODE`, Hopper; `matmul_decode`),
    /// and if so the k shares it is split in: Q4_K ([`GemmWgmma::unpacks`]) at
    /// [`F16_DECODE_MIN_ROWS`] (`FERROLM_F16_DECODE_ROWS`) to [`F16_DECODE_MAX_ROWS`] rows (one
    /// token tile, one consumer warpgroup), so each weight is read and unpacked once. The
    /// tiles of so few tokens leave most SMs idle, so k is shared out over them
    /// ([`split_ways`], in super-blocks; `FERROLM_MMQ_SPLIT_K=0`: unsplit), and the product
    /// takes the GEMM only where a share keeps [`F16_DECODE_MIN_SHARE_BLOCKS`] super-blocks
    /// (a block's start costs what a few super-blocks take). `FERROLM_F16_DECODE_SPLITS`
    /// forces the shares, and the GEMM with them. Contract: the f16 GEMM's, the shares added
    /// in a fixed order.
    pub fn f16_decode(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Option<usize> {
        let min = self.switches.f16_decode_rows.unwrap_or(F16_DECODE_MIN_ROWS);
        let take = self.sequence_batches
            && self.staged_matvec(ty, rows, cols, n).is_none()
            && self.switches.f16_decode
            && self.switches.gemm_f16
            && self.switches.gemm_f16_unpack
            && self.device.f16_gemm
            && self.switches.int_scales != Some(true)
            && GemmWgmma::unpacks(ty)
            && cols.is_multiple_of(256)
            && GemmWgmma::supports(ty, rows, cols)
            && (min..=F16_DECODE_MAX_ROWS).contains(&n);
        if !take {
            return None;
        }
        let blocks = cols / 256;
        let may_split = if self.switches.split_k { blocks } else { 0 };
        if let Some(ways) = self.switches.f16_decode_splits {
            return Some(if may_split > 0 { ways.min(blocks) } else { 1 });
        }
        let tiles = rows.div_ceil(GemmWgmma::TILE_ROWS);
        let ways = split_ways(tiles, self.device.sms, may_split);
        (blocks.div_ceil(ways) >= F16_DECODE_MIN_SHARE_BLOCKS).then_some(ways)
    }

    /// Whether `n` rows of a batched decode step's `ty` product of `rows` × `cols` take the
    /// staged tensor-core mat-vec (`FERROLM_MMVQ_STAGED`, off by default until measured), and
    /// if so in which order and how many k shares: passes of several sequences,
    /// [`STAGED_DEFAULT_ROWS`] (`FERROLM_MMVQ_STAGED_ROWS`) to [`STAGED_MAX_ROWS`] rows. The
    /// order is the pass's GEMM order: per sub-block, or the integer-scale block order where
    /// [`Plan::integer_scales`] says so (`FERROLM_CUDA_INT_SCALES=1` in a batched pass). k is
    /// shared out over the SMs its row blocks leave idle, twice over ([`split_ways`];
    /// `FERROLM_MMQ_SPLIT_K=0`: unsplit), or as `FERROLM_MMVQ_STAGED_SPLITS` says; never past
    /// the kernel's [`STAGED_SPLIT_BLOCKS`] row blocks. Contract: mmq's arithmetic in that order, the
    /// shares added in a fixed order.
    pub fn staged_matvec(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        n: usize,
    ) -> Option<(MmqOrder, usize)> {
        let min = self.switches.staged_rows.unwrap_or(STAGED_DEFAULT_ROWS);
        let blocks_order =
            self.integer_scales(ty, cols, n) && MmvqStaged::supports(ty, cols, MmqOrder::Blocks);
        let order = if blocks_order {
            MmqOrder::Blocks
        } else {
            MmqOrder::Subs
        };
        let take = self.sequence_batches
            && self.switches.staged
            && (min.max(STAGED_MIN_ROWS)..=STAGED_MAX_ROWS).contains(&n)
            && MmvqStaged::supports(ty, cols, order);
        if !take {
            return None;
        }
        let blocks = cols / 256;
        let row_blocks = MmvqStaged::row_blocks(rows);
        // Past the kernel's counters a product stays unsplit (split_ways says so too).
        let may_split = if self.switches.split_k && row_blocks <= STAGED_SPLIT_BLOCKS {
            blocks
        } else {
            0
        };
        let ways = match self.switches.staged_splits {
            Some(w) if may_split > 0 => w.min(blocks),
            Some(_) => 1,
            None => split_ways(row_blocks, 2 * self.device.sms, may_split),
        };
        Some((order, ways))
    }

    /// Whether `n` rows of a `ty` product over `cols` take the tensor-core mat-vec
    /// (`FERROLM_MMVQ_MMA`), and if so whether a warp takes two 16-row tiles: passes of several
    /// sequences only (its contract is the tensor-core one; a single sequence's decode keeps
    /// mmvq's bits), 2 to [`MMA_MV_MAX_ROWS`] rows. Two tiles wherever the kernel has them
    /// ([`MmvqMma::has_two_tiles`]: 33 rows or more, where each activation load then serves
    /// twice the weights), unless `FERROLM_MMVQ_MMA_TILES=1`.
    pub fn mma_matvec(&self, ty: GgmlType, cols: usize, n: usize) -> Option<bool> {
        let take = self.sequence_batches
            && self.switches.mma_matvec
            && (2..=MMA_MV_MAX_ROWS).contains(&n)
            && MmvqMma::supports(ty, cols);
        take.then(|| self.switches.mma_row_tiles != Some(1) && MmvqMma::has_two_tiles(n))
    }

    /// Whether mat-vecs of `ty` take the wide (warp-per-row) kernels.
    pub fn matvec_wide(&self, ty: GgmlType) -> bool {
        self.switches.mmvq_wide && Mmvq::has_wide(ty)
    }

    /// The GEMM of `n` rows with `ty` weights of `rows` × `cols` (a shape [`Mmq::supports`]):
    /// the CUDA-core kernel for widths that are not whole k-steps and short ubatches of the
    /// eight-lane formats ([`Plan::lanes`]), the tensor-core tiles otherwise.
    pub fn gemm(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> Gemm {
        // Rows of a partial last k step keep the CPU's kernel where the CPU's bits are owed.
        let tail = !cols.is_multiple_of(crate::ops::MMQ_BK);
        if !Mmq::tiles_take(ty, cols)
            || self.lanes(ty, n)
            || (tail && !self.tensor_core_contract(n))
        {
            Gemm::Small
        } else {
            let tile = self.tile(ty, rows, cols, n);
            Gemm::Tiles {
                tile,
                launches: self.dense_order(ty, cols, n),
                splits: self.k_splits(ty, tile, rows, cols, n),
            }
        }
    }

    /// The k steps a `ty` GEMM of `n` rows over `cols` columns may split (0: none): under
    /// `FERROLM_MMQ_SPLIT_K`, where it sums in the per-sub-block order and is held to the
    /// tensor-core contract (within f32 rounding of the CPU) rather than to the CPU's bits:
    /// passes of several sequences ([`Plan::for_sequence_batches`]) and ubatches of
    /// [`CPU_ORDER_MAX_ROWS`] rows or more.
    fn split_steps(&self, ty: GgmlType, cols: usize, n: usize) -> usize {
        let contract = self.tensor_core_contract(n);
        if self.switches.split_k && contract && !self.integer_scales(ty, cols, n) {
            Mmq::k_steps(cols)
        } else {
            0
        }
    }

    /// Whether a GEMM of `n` rows is held to the tensor-core contract (within f32 rounding of
    /// the CPU) rather than to the CPU's bits: passes of several sequences
    /// ([`Plan::for_sequence_batches`]) and ubatches of [`CPU_ORDER_MAX_ROWS`] rows or more.
    fn tensor_core_contract(&self, n: usize) -> bool {
        self.sequence_batches || n >= CPU_ORDER_MAX_ROWS
    }

    /// The split-K ways of a `ty` GEMM over `rows` × `n` on `tile` ([`split_ways`]): where
    /// its tiles leave slots idle (a batched decode step's 9-64 rows give one column of tiles:
    /// qwen3-8b's 4096-row matrices 32 blocks on 132 SMs), shares in the idle slots; 1 where
    /// the tiles alone fill the GPU or [`Plan::split_steps`] says no.
    pub fn k_splits(&self, ty: GgmlType, tile: usize, rows: usize, cols: usize, n: usize) -> usize {
        let t = MMQ_TILES[tile];
        let slots = self.device.sms * self.blocks_per_sm(ty)[tile] as usize;
        let tiles = rows.div_ceil(t.bm) * n.div_ceil(t.bn);
        split_ways(tiles, slots, self.split_steps(ty, cols, n))
    }

    /// Blocks of each tile shape of `ty` one SM holds (0: none fit, or no GEMM for `ty`).
    fn blocks_per_sm(&self, ty: GgmlType) -> [u32; TILES] {
        self.device
            .mmq_blocks_per_sm
            .iter()
            .find(|(t, _)| *t == ty)
            .map_or([0; TILES], |(_, b)| *b)
    }

    /// Whether `n` activation rows of `ty` weights take the eight-lane kernel although the
    /// tensor-core tiles could: ubatches under [`LANES_MAX_TOKENS`] of the formats the CPU sums
    /// in eight lanes (Q8_0, Q5_0: `lanes` of the formats table), unless
    /// `FERROLM_CUDA_Q8_0_LANES=0`.
    pub fn lanes(&self, ty: GgmlType, n: usize) -> bool {
        formats::has(ty, |f| f.lanes) && self.switches.q8_0_lanes && n < LANES_MAX_TOKENS
    }

    /// The tile (index in [`MMQ_TILES`]) of a `ty` GEMM over `rows` × `n` with `cols`
    /// columns: `FERROLM_MMQ_TILE`, or [`auto_tile`] on this device. A pass of several
    /// sequences weighs the tiles with their split-K ways; a long prompt's ubatch keeps the
    /// choice measured without them (its splits come after: pp512 and pp2048 of qwen3-8b rose
    /// 3% with them, docs/perf.md).
    pub fn tile(&self, ty: GgmlType, rows: usize, cols: usize, n: usize) -> usize {
        let fits = self.blocks_per_sm(ty);
        let steps = if self.sequence_batches {
            self.split_steps(ty, cols, n)
        } else {
            0
        };
        self.switches
            .mmq_tile
            .unwrap_or_else(|| auto_tile(rows, n, steps, self.device.sms, |i| fits[i]))
    }

    /// Whether `ty` weights of `cols` columns take the CPU's integer-scale order in a GEMM of
    /// an `n`-row ubatch: Q4_K with Q8_K activations (one scale per block, which that order
    /// needs) under [`CPU_ORDER_MAX_ROWS`] rows. The order costs 10% of a long prompt (a second
    /// accumulator and the exact pair sums), so long ubatches take the per-sub-block order.
    /// `FERROLM_CUDA_INT_SCALES=0` or `=1` forces either.
    pub fn integer_scales(&self, ty: GgmlType, cols: usize, n: usize) -> bool {
        self.switches.int_scales.unwrap_or(n < CPU_ORDER_MAX_ROWS)
            && ty == GgmlType::Q4K
            && self.act_quant(ty, cols) == ActQuant::Q8K
    }

    /// The launches of a dense `n`-token GEMM as (first token, tokens, order), as the CPU's
    /// dense matmul orders them (`ferrolm_cpu::matmul::Order::Dense`): pairs for the first
    /// `n - n % 4` tokens when `n >= 4`, blocks for the rest.
    pub fn dense_order(
        &self,
        ty: GgmlType,
        cols: usize,
        n: usize,
    ) -> Vec<(usize, usize, MmqOrder)> {
        if !self.integer_scales(ty, cols, n) {
            return vec![(0, n, MmqOrder::Subs)];
        }
        let pairs = if n >= 4 { n - n % 4 } else { 0 };
        [
            (0, pairs, MmqOrder::Pairs),
            (pairs, n - pairs, MmqOrder::Blocks),
        ]
        .into_iter()
        .filter(|&(_, len, _)| len > 0)
        .collect()
    }

    /// The order of the expert GEMMs of an `n`-token ubatch: the CPU's expert matmuls take
    /// blocks.
    pub fn expert_order(&self, ty: GgmlType, cols: usize, n: usize) -> MmqOrder {
        if self.integer_scales(ty, cols, n) {
            MmqOrder::Blocks
        } else {
            MmqOrder::Subs
        }
    }

    /// Attention of a ubatch of `rows` query rows over a cache of `kv`: flash-decoding up to
    /// [`DECODE_MAX_ROWS`], a prefill kernel above; over a block cache (`-ctk q8_0`) the
    /// scalar prefill, the one that reads its blocks (dequantized per element, f32 after); over
    /// an f32 cache see [`Plan::prefill_kernel_f32`].
    /// Decode by KV group (`group` query heads a KV head) where an f16 cache and the group size
    /// have a kernel, unless `FERROLM_ATTN_GROUPED=0`. Every head size of `ATTN_HEAD_DIMS` has
    /// every decode kernel; for prefill see [`Plan::prefill_kernel`].
    pub fn attention(&self, rows: usize, kv: KvFormat, group: usize, head_dim: usize) -> Attn {
        if rows <= DECODE_MAX_ROWS {
            Attn::Decode {
                fused_combine: self.switches.fuse,
                grouped: self.switches.attn_grouped
                    && kv == KvFormat::F16
                    && ATTN_GROUPS.contains(&group),
            }
        } else if kv.is_block() {
            Attn::Prefill(PrefillKernel::Scalar)
        } else if kv == KvFormat::F32 {
            Attn::Prefill(self.prefill_kernel_f32(rows))
        } else {
            Attn::Prefill(self.prefill_kernel(rows, head_dim))
        }
    }

    /// Queries rounded through Q8_0 before attention over a quantized cache, as the CPU (and
    /// llama.cpp) quantizes them for its integer dots with q8_0/q4_0 keys; not under
    /// `FERROLM_ATTN=f32`, which on the CPU too keeps them f32.
    pub fn round_query(&self, kv: KvFormat) -> bool {
        kv.is_block() && self.switches.attn_ggml_small
    }

    /// The prefill kernel over an f32 cache (`-ctk f32`, the CPU's f32 path at every size):
    /// the CPU's f32 order below [`REF_MAX_ROWS`], the scalar prefill from there or when
    /// `FERROLM_ATTN_MMA` forces a kernel (the tensor-core and ggml-order kernels read f16
    /// only). Both are f32 throughout; only the order of the sums differs.
    pub fn prefill_kernel_f32(&self, n_q: usize) -> PrefillKernel {
        if self.switches.attn_mma.is_none() && n_q < REF_MAX_ROWS {
            PrefillKernel::F32Ref
        } else {
            PrefillKernel::Scalar
        }
    }

    /// The prefill kernel for `n_q` query rows of heads of `head_dim` unless `FERROLM_ATTN_MMA`
    /// forces one: below [`GGML_SMALL_ROWS`], ggml's arithmetic unless `FERROLM_ATTN=f32`; then
    /// the CPU's f32 arithmetic below [`REF_MAX_ROWS`]; the tensor-core kernel from there. Heads
    /// the tensor-core kernel does not take (192, 256, past [`MMA_HEAD_DIMS`]: its Q fragments
    /// and O accumulator would not fit a thread's registers) run the scalar prefill wherever it
    /// would have run, forced or not: the same f32 formula as the reference paths.
    pub fn prefill_kernel(&self, n_q: usize, head_dim: usize) -> PrefillKernel {
        let kernel = match self.switches.attn_mma {
            Some(true) => PrefillKernel::Mma,
            Some(false) => PrefillKernel::Scalar,
            None if n_q >= REF_MAX_ROWS => PrefillKernel::Mma,
            None if n_q < GGML_SMALL_ROWS && self.switches.attn_ggml_small => PrefillKernel::F16Ref,
            None => PrefillKernel::F32Ref,
        };
        if kernel == PrefillKernel::Mma && !MMA_HEAD_DIMS.contains(&head_dim) {
            PrefillKernel::Scalar
        } else {
            kernel
        }
    }

    /// Whether the decode rows of several sequences (each at most [`DECODE_MAX_ROWS`] rows)
    /// take one attention launch per layer, each row reading its own sequence's cache
    /// (`attn_decode_rows_*`): f16 caches, head sizes and group sizes it has instances for,
    /// unless `FERROLM_ATTN_BATCHED=0`. Sequences of more rows keep their prefill kernels.
    pub fn batched_attention(
        &self,
        kv: KvFormat,
        n_head: usize,
        n_kv_head: usize,
        head_dim: usize,
    ) -> bool {
        self.switches.attn_batched
            && kv == KvFormat::F16
            && AttentionRows::supports(n_head, n_kv_head, head_dim)
    }

    /// Splits of one row of the batched decode attention with `n_keys` keys: one a
    /// [`ROWS_SPLIT_KEYS`] keys, at most `cap` (its sequence's partials). From the row's own key
    /// count only, so that a row's bits never depend on what else shares its batch; a batch of
    /// many rows fills the GPU with rows rather than with splits.
    pub fn rows_splits(&self, n_keys: usize, cap: usize) -> usize {
        let keys = self.switches.rows_split_keys.unwrap_or(ROWS_SPLIT_KEYS);
        n_keys.div_ceil(keys).clamp(1, cap.max(1))
    }

    /// Positions a block of the paged KV cache of a sequence of up to `n_ctx` positions
    /// (`FERROLM_KV_BLOCK`, else [`KV_BLOCK`]), a power of two; never more than `n_ctx`
    /// rounded up to one (at least 16), so that a block as large as any context makes one
    /// block a sequence.
    pub fn kv_block(&self, n_ctx: usize) -> usize {
        let most = n_ctx.next_power_of_two().max(16);
        self.switches.kv_block.unwrap_or(KV_BLOCK).min(most)
    }

    /// Whether sequences may share one pool of KV blocks (`FERROLM_KV_POOL`).
    pub fn kv_pool(&self) -> bool {
        self.switches.kv_pool
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

    /// Flash-decoding splits for a cache of `n_ctx` positions and `n_kv_head` KV heads (a block
    /// per split and KV head, or query head): about [`DECODE_BLOCKS_PER_SM`] blocks an SM, but no
    /// split under [`DECODE_MIN_SPLIT_KEYS`] keys at full context, except that a short context
    /// still takes up to [`DECODE_SHORT_SPLITS`] splits of [`DECODE_SHORT_SPLIT_KEYS`] or more;
    /// at most [`ATTN_MAX_SPLITS`].
    /// `FERROLM_ATTN_SPLIT_KEYS` fixes the keys a split instead. At 16k keys on the H200 the
    /// best fixed choice was 256 keys for 8 KV heads and 512 for 16: 512 blocks either way
    /// (docs/perf.md, "Issue 15, step 3").
    pub fn decode_splits(&self, n_ctx: usize, n_kv_head: usize) -> usize {
        let splits = match self.switches.attn_split_keys {
            Some(keys) => n_ctx.div_ceil(keys),
            None => n_ctx
                .div_ceil(DECODE_MIN_SPLIT_KEYS)
                .max(
                    n_ctx
                        .div_ceil(DECODE_SHORT_SPLIT_KEYS)
                        .min(DECODE_SHORT_SPLITS),
                )
                .min((DECODE_BLOCKS_PER_SM * self.device.sms).div_ceil(n_kv_head.max(1))),
        };
        splits.clamp(1, ATTN_MAX_SPLITS)
    }

    /// Flash-decoding splits of a layer whose cache's work holds `cap` ([`Self::decode_splits`]
    /// of its context): a sliding window's keys are split as a context of the window's length
    /// would be (so that a window of 512 at a 32k context is not cut into slivers of a few keys
    /// whose combine costs more than the walk), never more than `cap`; without a window, `cap`.
    pub fn window_splits(&self, cap: usize, window: Option<usize>, n_kv_head: usize) -> usize {
        match window {
            Some(w) => self.decode_splits(w, n_kv_head).min(cap).max(1),
            None => cap,
        }
    }

    /// The MoE FFN of a ubatch: the decode kernels for a few tokens of int8 experts they
    /// take, and in slices for more tokens of int8 experts whose widths the GEMM does not
    /// take; the expert GEMMs otherwise (float experts: their f32 kernels, any token count).
    pub fn moe(&self, s: &MoeShape) -> MoePath {
        if self.f16_experts(s) {
            return MoePath::F16;
        }
        let decode = !s.is_float() && MoeDecodeWork::supports(s.n_used, s.n_ff);
        let gemm = self.expert_gemm(s);
        if matches!(
            gemm,
            ExpertGemm::Int8 {
                matvec_mma: Some(_),
                ..
            }
        ) {
            MoePath::Gemm(gemm)
        } else if decode && s.tokens <= MOE_DECODE_MAX_TOKENS {
            MoePath::MatVec(self.expert_matvec(s))
        } else if decode && !MoeGemm::supports_widths(s.gate, s.down, s.n_embd, s.n_ff) {
            MoePath::MatVecSlices(self.expert_matvec(s))
        } else {
            MoePath::Gemm(gemm)
        }
    }

    /// How the decode kernels run `s` (fused where gate and up share a format).
    pub fn expert_matvec(&self, s: &MoeShape) -> ExpertMatVec {
        ExpertMatVec {
            fused: self.switches.moe_fused && s.gate == s.up,
            wide: self.switches.mmvq_wide,
            x_quant: self.act_quant(s.gate, s.n_embd),
            h_quant: self.act_quant(s.down, s.n_ff),
        }
    }

    /// How the expert GEMMs run `s`.
    pub fn expert_gemm(&self, s: &MoeShape) -> ExpertGemm {
        if s.is_float() {
            return ExpertGemm::Float;
        }
        let (gate_up, down) = (
            self.expert_order(s.gate, s.n_embd, s.tokens),
            self.expert_order(s.down, s.n_ff, s.tokens),
        );
        let subs = gate_up == MmqOrder::Subs && down == MmqOrder::Subs;
        ExpertGemm::Int8 {
            grouped: self.switches.moe_grouped,
            x_quant: self.act_quant(s.gate, s.n_embd),
            h_quant: self.act_quant(s.down, s.n_ff),
            gate_up,
            down,
            matvec_mma: if subs { self.expert_mma_tiles(s) } else { None },
            index_one_block: self.moe_step_fuse()
                && s.tokens * s.n_used <= MOE_INDEX_ONE_BLOCK_PAIRS
                && s.n_expert <= MOE_INDEX_ONE_BLOCK_EXPERTS,
        }
    }

    /// Whether the MoE launch cuts of a batched step ([`ExpertGemm::Int8`]'s `index_one_block`,
    /// and the experts' x from the norm's blocks) are taken: decode fusions
    /// (`FERROLM_CUDA_FUSE`) with a switch of their own (`FERROLM_MOE_STEP_FUSE`), the same
    /// bytes either way.
    pub fn moe_step_fuse(&self) -> bool {
        self.switches.fuse && self.switches.moe_step_fuse
    }

    /// Whether a ubatch's experts take the tensor-core mat-vec (`FERROLM_MOE_MMA`), and if so
    /// its column tiles of 8 pairs a pass: passes of several sequences only (its contract is
    /// the tensor-core one), 2 tokens or more, both formats in the kernel
    /// ([`MmvqMma::supports`]), at most [`MOE_MMA_MAX_PAIRS`] pairs an expert on average
    /// unless `FERROLM_MOE_MMA_PAIRS` says otherwise (the GEMM tiles above). One column tile a
    /// pass, unless `FERROLM_MOE_MMA_TILES` says: an expert's pairs past the tiles take another
    /// pass over its weights.
    pub fn expert_mma_tiles(&self, s: &MoeShape) -> Option<usize> {
        let pairs = s.tokens * s.n_used;
        let take = self.sequence_batches
            && self.switches.moe_mma
            && s.tokens >= 2
            && s.gate == s.up
            && pairs <= self.switches.moe_mma_pairs.unwrap_or(MOE_MMA_MAX_PAIRS) * s.n_expert
            && MmvqMma::supports(s.gate, s.n_embd)
            && MmvqMma::supports(s.down, s.n_ff);
        take.then(|| self.switches.moe_mma_tiles.unwrap_or(1))
    }

    /// The router logits of `n` tokens of `n_embd`: the mat-vec kernel for a few tokens of
    /// rows it can stage in shared memory, with 16-byte loads (and the top-k in the same launch
    /// among the decode fusions); the f32 GEMM otherwise. Both give the CPU's bits.
    pub fn router_logits(&self, n: usize, n_embd: usize) -> RouterLogits {
        let stages = n_embd.is_multiple_of(4) && n_embd <= ROUTER_SMALL_MAX_EMBD;
        if n <= ROUTER_SMALL_N && stages && self.switches.fuse {
            RouterLogits::MatVecTopk
        } else if n <= ROUTER_SMALL_N && stages {
            RouterLogits::MatVec
        } else {
            RouterLogits::Gemm
        }
    }

    /// Whether one sequence's rotation of q and k also stores its keys and values in the
    /// cache (`FERROLM_ROPE_STORE`, a decode fusion: off under `FERROLM_CUDA_FUSE=0`), where
    /// the cache's format lets it (`NormRope::rope_qk_store`).
    pub fn rope_store(&self) -> bool {
        self.switches.fuse && self.switches.rope_store
    }

    /// Whether the norm before an MoE FFN of `n` tokens of `n_embd` runs in the router's
    /// launch (`add_rms_norm_route_small`, the same bits as the fused norm and then
    /// `moe_route_small`): where both of those would run, the norm's block is one the
    /// router's blocks can take, and the tokens are at most [`NORM_ROUTE_MAX_ROWS`] (every
    /// block of that launch takes every row's norm, one row after another).
    pub fn norm_route(&self, n: usize, n_embd: usize) -> bool {
        self.switches.norm_route
            && n <= self.switches.norm_route_rows.unwrap_or(NORM_ROUTE_MAX_ROWS)
            && self.fused_norm(n_embd)
            && self.router_logits(n, n_embd) == RouterLogits::MatVecTopk
    }
}

/// The split-K ways of a GEMM of `tiles` tiles with `slots` block slots on the GPU and
/// `steps` k steps it may split (0: none): as many shares as the idle slots take, each at
/// least [`SPLIT_MIN_STEPS`] steps, at most [`MMQ_MAX_SPLITS`], none empty; 1 where the tiles
/// alone fill half the slots or more.
pub fn split_ways(tiles: usize, slots: usize, steps: usize) -> usize {
    if tiles == 0 || tiles > MMQ_SPLIT_TILES {
        return 1;
    }
    let ways = (slots / tiles)
        .min(steps / SPLIT_MIN_STEPS)
        .min(MMQ_MAX_SPLITS);
    if ways < 2 {
        return 1;
    }
    // The steps a share rounded up, then the shares that takes.
    steps.div_ceil(steps.div_ceil(ways))
}

/// The tile for `rows` × `n` on `sms` multiprocessors, given how many blocks of each tile fit
/// one (0: the tile does not fit this device) and the k steps split-K may share out (0: none):
/// the best guessed speed times the share of the GPU's slot time that does work (the last
/// wave's idle slots, and a share's steps rounded up) and the share of the tiles' columns
/// that are tokens. Small GEMMs get small tiles so that every SM has work; a batched decode
/// step's 9-32 rows get the 32-column tile, split over the slots its tiles leave idle, rather
/// than a 128-column one three quarters empty.
pub fn auto_tile(
    rows: usize,
    n: usize,
    steps: usize,
    sms: usize,
    blocks_per_sm: impl Fn(usize) -> u32,
) -> usize {
    let mut best = (0.0, MMQ_TILES.len() - 1);
    for (i, t) in MMQ_TILES.iter().enumerate() {
        let slots = sms * blocks_per_sm(i) as usize;
        if slots == 0 {
            continue;
        }
        let tiles = rows.div_ceil(t.bm) * n.div_ceil(t.bn);
        let ways = split_ways(tiles, slots, steps);
        let (blocks, k) = (tiles * ways, steps.max(1));
        let slot_time = blocks.div_ceil(slots) * slots * k.div_ceil(ways);
        let busy = (tiles * k) as f64 / slot_time as f64;
        let used = n as f64 / (n.div_ceil(t.bn) * t.bn).max(1) as f64;
        let score = busy * used * TILE_SPEED[i];
        if score > best.0 {
            best = (score, i);
        }
    }
    best.1
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
