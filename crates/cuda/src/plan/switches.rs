//! The run-time `FERROLM_*` switches of the CUDA backend, each parsed once, from an environment
//! given as a lookup (the process environment, or a map in tests), with an error that names
//! the variable and the values it takes.
//!
//! Every value that worked before the plan keeps its meaning: `0` turns a default-on switch
//! off, `1` (or an empty value, or none) leaves it on. Values that used to be read as "not 0"
//! by accident (`maybe`, `false`) are errors now, so a typo no longer silently keeps a default.

use crate::error::{CudaError, Result};
use crate::ops::MMQ_TILES;
use std::fmt;

/// Every switch, with its default where unset. Toolchain variables (`FERROLM_CUDA_AOT`,
/// `FERROLM_CACHE`, `FERROLM_NVRTC`, `FERROLM_CUDA_INCLUDE`) and `FERROLM_DUMP_DIR` are not
/// kernel choices and are read elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switches {
    /// `FERROLM_CUDA_MMQ`: the int8 GEMM for batches over the mat-vec's rows (else mat-vec
    /// slices).
    pub mmq: bool,
    /// `FERROLM_CUDA_FUSE`: the decode fusions (norm+quantize, paired mat-vecs, SwiGLU in the
    /// mat-vec, q/k norm+RoPE, RoPE of q and k, decode attention's combine in the split kernel).
    pub fuse: bool,
    /// `FERROLM_NORM_ROUTE`: among the decode fusions, the norm before an MoE FFN taken by
    /// the router's launch (each router block takes the norm of the few rows itself).
    pub norm_route: bool,
    /// `FERROLM_NORM_ROUTE_ROWS`: the most tokens that fusion takes (default
    /// [`NORM_ROUTE_MAX_ROWS`](super::NORM_ROUTE_MAX_ROWS)).
    pub norm_route_rows: Option<usize>,
    /// `FERROLM_NORM_ROUTE_CLUSTER=1`: that launch as one thread-block cluster (sm_90), the
    /// logits gathered in one block's shared memory (`add_rms_norm_route_cluster`), where its
    /// rows fit; else a block an expert and a counter. The same bits. Off: session 34 measured
    /// it 7% slower (qwen3-30b-a3b and OLMoE tg128, H100): 8 SMs load the router's rows.
    pub norm_route_cluster: bool,
    /// `FERROLM_ROPE_STORE=1`: among the decode fusions, one sequence's keys and values stored
    /// in an f16 or f32 cache by the launch that rotates q and k (else by its own launch).
    /// Off by default: the same bits, but session 25's device run measured it slower (qwen3-8b
    /// tg128 -0.6%, olmoe -1.7%; smollm2 +0.4%).
    pub rope_store: bool,
    /// `FERROLM_ATTN_ROPE`: among the decode fusions, one token's per-head q/k norms, NEOX
    /// rotation and KV store in the tensor-core decode walk's launch
    /// (`attn_decode_group_tc_rope_*`: each block norms and rotates its own query heads, the
    /// split that holds the new position its key, which it stores and patches into its tile),
    /// with the older keys' tiles asked for before the wait for the kernel ahead. Two launches
    /// fewer a layer (4.7 + 0.6 µs of qwen3-30b-a3b's chain, session 34). The same bits. On:
    /// tg128 +4.8% qwen3-30b-a3b, +4.1% qwen3-8b (session 37, H100).
    pub attn_rope: bool,
    /// `FERROLM_ATTN_ROPE_ROWS=1`: `FERROLM_ATTN_ROPE` for whole-row q/k norms (OLMoE's) too,
    /// on the group block (`attn_decode_group_rope_row_*`: each block takes both rows' sums of
    /// squares in the norm launch's order, then norms and rotates its own head). The same bits.
    /// On: OLMoE tg128 +5.5% (session 38, H100) with its row sums' loads all issued first
    /// (as first written, a loop of L2 round trips, it was -3.5%).
    pub attn_rope_rows: bool,
    /// `FERROLM_ATTN_HEAD_SPLIT=1`: the rotating tensor-core walk (`FERROLM_ATTN_ROPE`) takes a
    /// KV head's 8 query heads in two blocks of 4 (`attn_decode_group_tc_rope_d<D>_g8h2`):
    /// twice the blocks, each block's chain of heads to norm, rotate and score half as long
    /// (qwen3-30b-a3b at a short context: 16 blocks of 1,351 instructions a warp, session 37's
    /// ncu). The same bits where no block's largest query passes 2^15, else within the walk's
    /// bound (its prescale is each block's own). On: qwen3-30b-a3b tg128 +1.4% (session 38,
    /// H100).
    pub attn_head_split: bool,
    /// `FERROLM_ATTN_BULK` (on; `=0` off): the whole-row rotating walk
    /// (`FERROLM_ATTN_ROPE_ROWS`) takes its K and V tiles by sm_90's bulk copies, one thread's
    /// requests a tile completing on an mbarrier (`attn_decode_group_rope_row_bulk_*`), where
    /// 128 threads' 16-byte copies took 30% of its issue slots at 16,384 keys (session 39's
    /// ncu). The same bits (the same values in another shared-memory layout). On: OLMoE tg128
    /// at `-d 16384` +2.5%, level at depth 0 (session 40, H100).
    pub attn_bulk: bool,
    /// `FERROLM_QKV_ONE`: among the decode fusions, one token's q, k and v products in one
    /// launch (the q/k pair's blocks and v's), where the pair would run. On by default since
    /// session 25's device run: the same bits, qwen3-8b tg128 +4%, olmoe +3%.
    pub qkv_one: bool,
    /// `FERROLM_NORM_IN_QKV`: where one token's q, k and v share a launch, the attention's
    /// norm (and the residual add before it) taken in that launch too, each block norming the
    /// row itself (`Mmvq::norm_triple`: the same bits). Off: session 35's H100 run measured
    /// it slower (qwen3-30b-a3b tg128 -10%, olmoe -14%, qwen3-8b -27%; every block repeats
    /// the whole row's norm).
    pub norm_in_qkv: bool,
    /// `FERROLM_NORM_IN_GLU`: the FFN's norm (and the residual add before it) taken in one
    /// token's SwiGLU gate/up launch, as `FERROLM_NORM_IN_QKV` takes the attention's
    /// (`Mmvq::norm_glu`: the same bits). Off: slower, as that one (qwen3-8b tg128 -30%,
    /// session 35).
    pub norm_in_glu: bool,
    /// `FERROLM_CUDA_GRAPH`: decode steps replayed as CUDA graphs.
    pub graphs: bool,
    /// `FERROLM_ATTN_MMA`: prefill attention forced onto the tensor-core kernel (`Some(true)`)
    /// or the scalar f32 one (`Some(false)`); `None`: by rows.
    pub attn_mma: Option<bool>,
    /// `FERROLM_ATTN` not `f32`: ubatches under 64 rows in ggml's f16 attention arithmetic.
    pub attn_ggml_small: bool,
    /// `FERROLM_CUDA_INT_SCALES`: Q4_K GEMMs forced into (`Some(true)`) or out of the CPU's
    /// integer-scale order; `None`: by rows.
    pub int_scales: Option<bool>,
    /// `FERROLM_MMQ_TILE`: the GEMM tile, an index in [`MMQ_TILES`]; `None`: auto.
    pub mmq_tile: Option<usize>,
    /// `FERROLM_CUDA_Q8_0_LANES`: short Q8_0 and Q5_0 ubatches on the eight-lane CUDA-core
    /// kernels.
    pub q8_0_lanes: bool,
    /// `FERROLM_MOE_GROUPED`: MoE prefill GEMMs in one launch for all experts.
    pub moe_grouped: bool,
    /// `FERROLM_MMVQ_WIDE`: the wide (warp-per-row) mat-vec and MoE decode walks.
    pub mmvq_wide: bool,
    /// `FERROLM_MOE_FUSED`: MoE decode on the fused kernels (else per-slot mat-vecs).
    pub moe_fused: bool,
    /// `FERROLM_MOE_GATE_UP_WARPS`: warps a block of the fused MoE decode gate/up kernel
    /// (1-8); `None`: the plan's choice by tokens
    /// ([`MOE_GATE_UP_WARPS_ONE`](super::MOE_GATE_UP_WARPS_ONE) at one). The same bits.
    pub moe_gate_up_warps: Option<usize>,
    /// `FERROLM_MOE_DOWN_PREFETCH=1`: the fused MoE decode gate/up kernel asks L2 for its
    /// slot's expert's down weights (a bulk prefetch a block, sm_90), so the down kernel after
    /// it reads them from L2. Changes no bits. Off: session 34 measured it 3% slower
    /// (qwen3-30b-a3b and OLMoE tg128, H100).
    pub moe_down_prefetch: bool,
    /// `FERROLM_MOE_H_IN_GATE_UP=1`: at one token the fused MoE gate/up launch also quantizes
    /// h for down (the last of a 256-row group's blocks, counted in global memory), in place of
    /// `quantize_q8_k`'s launch (3.8 µs of a qwen3-30b-a3b layer's chain, session 34, H100).
    /// The same bits. Off: session 35's H100 run measured qwen3-30b-a3b level, olmoe -2.5%.
    pub moe_h_in_gate_up: bool,
    /// `FERROLM_MOE_ROWS_L1=1`: each warp of the fused MoE decode kernels asks L1 for its
    /// expert rows before walking them. The walk holds only some rows' loads in its registers
    /// at a time, so a warp waits on memory about eight times in a row (session 36's ncu of
    /// qwen3-30b-a3b's one-token experts: 1,700 instructions a warp at 17 cycles each); the
    /// requests take no registers and are all in flight at once. The same bits.
    pub moe_rows_l1: bool,
    /// `FERROLM_MOE_TIGHT=M`: at one token the lean MoE kernels of Q4_K and Q6_K in their
    /// `tight_` entries, four blocks an SM of 64 registers where the lean entries fit three of
    /// 80 (down: one token's direct walk only, two steps of it in flight): bit 1 gate/up, bit
    /// 2 down. The same bits. Default 2: tg128 +4.8% qwen3-30b-a3b, +3.2% OLMoE with down's
    /// (its rows already in L1 by `FERROLM_MOE_DOWN_EARLY`; session 38, H100). Gate/up's
    /// (bit 1) keeps the lean walk: level on OLMoE, -2.6% on qwen3-30b-a3b (its first version,
    /// two steps in flight and the direct walk only, lost 7-8%).
    pub moe_tight: usize,
    /// `FERROLM_MOE_DOWN_EARLY`: at one token the fused MoE down kernel reads the router's
    /// ids and asks L1 for its warps' rows before its wait for the kernel ahead (the ids are
    /// final there: gate/up runs between the router and down), so its walk after the wait
    /// finds them near instead of paying a round trip to memory first. The same bits. On:
    /// tg128 +2.5% qwen3-30b-a3b, OLMoE level (session 38, H100).
    pub moe_down_early: bool,
    /// `FERROLM_MOE_BULK_L2=1`: at one token each warp of the fused MoE kernels asks L2 for
    /// its expert rows in one bulk request (sm_90) as soon as it knows the expert (gate/up:
    /// ahead of the activations' stage; down: with `FERROLM_MOE_DOWN_EARLY`, before the
    /// wait, in place of L1), every byte in flight at once where the walk asks a few steps
    /// at a time. The same bits. Off: written in session 38, measured there.
    pub moe_bulk_l2: bool,
    /// `FERROLM_MOE_DOWN_DIRECT`: at one token the fused MoE down kernel deals slot t's
    /// rows straight to warp t (mod the block's warps), as its leader search over every slot's
    /// masks would, without that search: session 36's ncu put several hundred instructions and
    /// local-memory round trips ahead of each warp's first weight load. The same bits. On:
    /// the down kernel 27-32% faster, tg128 +5% (qwen3-30b-a3b) and +7% (OLMoE) on the H100.
    pub moe_down_direct: bool,
    /// `FERROLM_MOE_GATE_UP_DIRECT`: at one token each warp of the fused MoE gate/up kernel
    /// walks its slot straight away, as `FERROLM_MOE_DOWN_DIRECT` does for down, without the
    /// members' masks (local memory in session 36's ncu: `STL`/`LDL` ahead of the walk). The
    /// same bits. On: the kernel 2,253,312 -> 2,211,840 instructions, tg128 +0.5% (H100).
    pub moe_gate_up_direct: bool,
    /// `FERROLM_MOE_LEAN`: at one token the fused MoE kernels of Q4_K, Q5_K and Q6_K experts
    /// take MXFP4's lean shape (`moe_*_lean_<type>_n1`: 2 gate and up rows a warp and 4 down
    /// rows a block where they take 4 and 8, three blocks an SM): each warp's instruction chain
    /// half as long and twice the warps, which is what session 36 found these kernels' time to
    /// be. Session 20 measured the shape slower for the K-quants, before the down kernel's
    /// leader search went. The same bits. On: tg128 +4.6% qwen3-30b-a3b, +0.3% OLMoE (session
    /// 37, H100).
    pub moe_lean: bool,
    /// `FERROLM_ROUTE_TOPK_BLOCK`: the router launch's last block takes one token's softmax
    /// and top-k with all its threads (an expert a thread, each expert's slot its rank), where
    /// one warp takes k rounds of arg-max (over a thousand instructions in a row, session 36's
    /// ncu of qwen3-30b-a3b's router). The same bits. On: tg128 +3.3% qwen3-30b-a3b, +0.3%
    /// OLMoE (session 38, H100; session 36 measured it -2%, before the lean experts and the
    /// exact norm changed the chain around it).
    pub route_topk_block: bool,
    /// `FERROLM_ROUTE_KEEP_SUMS`: the router launch's blocks keep one token's x + add in
    /// shared memory at the norm, and its last block writes the residual back from there, where
    /// it read x and add again from L2 (a round trip on the layer's chain). The same bits.
    pub route_keep_sums: bool,
    /// `FERROLM_ROUTE_SPREAD_OUT=1`: the router launch's norm outputs (`out` and its
    /// activation blocks) are written a share a block, each block's after its count (from the
    /// normed rows in its shared memory), where block 0 wrote them all before its own count
    /// and read its Q8_K rows back from L2: work ahead of the last count, on the layer's chain.
    /// The same bits.
    pub route_spread_out: bool,
    /// `FERROLM_QK_NORM_REGS`: per-head q/k norms (qwen3's) and their NEOX rotation in one
    /// launch with each head's values in its threads' registers, where a thread's elements hold
    /// whole rotation pairs: no store, barrier and reload between the norm and the rotation,
    /// and none of the rotation's index divisions. The same bits. On: the launch 482 -> 273
    /// instructions a warp, tg128 +3% (qwen3-30b-a3b), +2.5% (qwen3-8b), H100.
    pub head_norm_regs: bool,
    /// `FERROLM_NORM_EXACT`: the fused add + RMS norm + quantize (`add_rms_norm_q8_1_f32`)
    /// takes rows of exactly 2, 4 or 8 elements a thread (a decode row of 2,048 or 4,096) in
    /// its own entry, `add_rms_norm_exact_q8_1_f32`: its loops without the guarded iterations past them, and its Q8_K
    /// pass from the normed row in shared memory instead of back from L2 after the barrier.
    /// One block at one token, so its warps' chains are the step's (508 instructions a warp
    /// on qwen3-30b-a3b, session 36). The same bits. On: tg128 +3.2% qwen3-30b-a3b, +0.2%
    /// OLMoE (session 37, H100).
    pub norm_exact: bool,
    /// `FERROLM_CUDA_Q8K`: K-quant weights meet Q8_K activations (else Q8_1).
    pub q8k: bool,
    /// `FERROLM_ATTN_GROUPED`: decode attention a block per KV head and split, for all the
    /// query heads that share it (else a block per query head).
    pub attn_grouped: bool,
    /// `FERROLM_ATTN_TC`: decode by KV group on the tensor cores (f16 MMAs, q and the weights
    /// as two f16 terms each) where the shape has them (on: qwen3-8b at 16,384 keys +3%,
    /// qwen3-30b-a3b at 8 sequences +4%, H100, session 29).
    pub attn_tc: bool,
    /// `FERROLM_ATTN_COMBINE_WALK=1`: decode attention's splits combined in the walk's last
    /// block a KV group, not in their own launch (a block a query head). Off since session 31
    /// (H100, tg128: qwen3-30b-a3b +1.5-2% in its own launch, olmoe-1b-7b +1%, qwen3-8b level
    /// at depth 0 and 16,384).
    pub attn_combine_walk: bool,
    /// `FERROLM_ATTN_COMBINE_Q8K=0`: decode attention's own combine launch leaves the output
    /// f32 only, and the product after it quantizes it in a launch of its own (as before
    /// session 32); by default the combine writes the Q8_K copy too.
    pub attn_combine_q8k: bool,
    /// `FERROLM_ATTN_SPLIT_KEYS`: decode attention's keys a split at full context (splits are
    /// `n_ctx / this`, 1 to `ATTN_MAX_SPLITS`); `None`: the plan's choice by blocks.
    pub attn_split_keys: Option<usize>,
    /// `FERROLM_ROWS_SPLIT_KEYS`: the batched decode attention's keys a split (a row's splits
    /// are its keys / this, up to its cache's); `None`: `ROWS_SPLIT_KEYS`.
    pub rows_split_keys: Option<usize>,
    /// `FERROLM_KV_BLOCK`: positions a block of the paged KV cache (a power of two from 16);
    /// `None`: `KV_BLOCK`. A very large block gives each sequence one block: the cache as a
    /// contiguous array, for bisecting.
    pub kv_block: Option<usize>,
    /// `FERROLM_KV_POOL`: sequences of a server or a batched bench share one pool of KV
    /// blocks (else each cache is a pool of its own that holds its whole context, as before
    /// paging).
    pub kv_pool: bool,
    /// `FERROLM_PINNED_LOGITS`: a pass's logits copied into page-locked (cacheable) host
    /// memory kept from pass to pass (`=0`: pageable memory; the same bytes). On by default
    /// since session 25's device run: qwen3-8b's 64-sequence logits copy 4.1 → 0.95 ms, S_TG
    /// +12% (session 15's page-locked copy lost: it was copied through, and write-combined).
    pub pinned_logits: bool,
    /// `FERROLM_GREEDY_ON_DEVICE`: a pass whose caller wants only each row's greedy choice (a
    /// server step of greedy requests) picks it on the GPU (`greedy_rows_f32`) and brings back
    /// two ids a row instead of the logits. On by default since session 26's device run (the
    /// picks equal the host's; the server's 64-stream decode +7%); `0` turns it off.
    pub greedy_on_device: bool,
    /// `FERROLM_ATTN_BATCHED`: decode attention of several sequences in one launch per layer
    /// (`attn_decode_rows_*`, each row through its sequence's cache) instead of a launch per
    /// sequence over copied rows.
    pub attn_batched: bool,
    /// `FERROLM_ROPE_TABLE`: RoPE's cos/sin made once a pass into a table that every layer's
    /// rotation reads (else each computes its own; the same bits).
    pub rope_table: bool,
    /// `FERROLM_CUDA_PDL`: programmatic dependent launch on sm_90+ (each kernel's blocks
    /// scheduled while the one before finishes; see `ops/launch.rs`).
    pub pdl: bool,
    /// `FERROLM_CUDA_CARVEOUT=N`: every kernel's preferred shared-memory carveout, N percent of
    /// the most (0-100; `None`: the driver's choice a kernel). An SM holds blocks of two kernels
    /// only in one configuration, so kernels of different carveouts do not overlap under PDL;
    /// one carveout for all might let them (session 30's ncu: 6-15 µs a launch with no SM
    /// active). The same bits either way.
    pub carveout: Option<usize>,
    /// `FERROLM_CUDA_PREFETCH=1`: under PDL, mat-vecs ask L2 for their weights before waiting
    /// for the kernel ahead. Off by default: measured 4.5% slower on qwen3-8b, 1% on
    /// smollm2-1.7b, 1% faster on olmoe-1b-7b (docs/perf.md, "Issue 15").
    pub prefetch: bool,
    /// `FERROLM_CUDA_PREFETCH_L1=1`: that prefetch (on with this) into the asking SM's L1,
    /// where the block that asks then reads them. The same bits. Off: level with the L2
    /// prefetch (session 38, H100: both +1.2% on qwen3-30b-a3b, level on OLMoE, -2.6% on
    /// qwen3-8b).
    pub prefetch_l1: bool,
    /// `FERROLM_CUDA_PREFETCH_MAX_MB=N`: that prefetch (to L2, under PDL) for the mat-vecs
    /// whose weights are at most N MB alone (`auto`, the default: the plan's
    /// `PREFETCH_MAX_MB_AUTO`; 0: none). Session 38 measured the prefetch of every mat-vec
    /// +1.2% on qwen3-30b-a3b, whose dense products are its attention's few MB, and -2.6% on
    /// qwen3-8b, whose FFN matrices are 28-41 MB each: the prefetch pays where the weights fit
    /// in L2 beside the rest. The same bits.
    pub prefetch_max_mb: Option<usize>,
    /// `FERROLM_L2_AHEAD=F` (0 off, the default; 1 a line a request, 2 bulk requests; 3 the
    /// waits without requests, for bisecting what the branch costs by itself): a
    /// captured one-token step of a model whose layers all route forks a stream whose kernel
    /// (`l2_ahead`) asks L2 for layer l + 1's attention weights and router once layer l's
    /// router launch has started, while the router and the experts leave DRAM part idle. Off
    /// the chain, so it holds no launch back (a prefetch by a launch on it did: sessions
    /// 38-46). The same bits.
    pub l2_ahead: usize,
    /// `FERROLM_L2_AHEAD_BLOCKS=N` (1-128, default 32): that kernel's blocks of one warp.
    pub l2_ahead_blocks: usize,
    /// `FERROLM_MMVQ_STAGE=1`: wide mat-vec walks read their activations from a copy in shared
    /// memory (else from global memory; the same bits). Off by default: one decode token
    /// measured 2-6% slower on olmoe-1b-7b and smollm2-1.7b, level on qwen3-8b (docs/perf.md,
    /// "Issue 15, step 4"); kept for several columns, where each copy serves more rows.
    pub stage: bool,
    /// `FERROLM_MMQ_SPLIT_K`: GEMMs whose tiles leave SMs idle split k over more blocks,
    /// where the plan's contract is the tensor-core one (a batched decode step's few rows;
    /// long prompts). Within f32 rounding of the unsplit sum.
    pub split_k: bool,
    /// `FERROLM_GEMM_F16`: on Hopper, products of long ubatches (from `F16_GEMM_MIN_ROWS`
    /// rows) on the f16 warpgroup-MMA GEMM (`gemm_wgmma.cu`: the weight expanded to f16, the
    /// activations rounded to f16), where the format has an f16 expansion; else the int8 GEMM.
    pub gemm_f16: bool,
    /// `FERROLM_GEMM_F16_UNPACK`: the f16 GEMM unpacks Q4_K weights itself (from their
    /// blocks, in shared memory) instead of multiplying an f16 copy made first; the same bits.
    pub gemm_f16_unpack: bool,
    /// `FERROLM_F16_DECODE`: on Hopper, a batched decode step's Q4_K products (from
    /// `FERROLM_F16_DECODE_ROWS` rows) on the f16 GEMM with the weight unpacked in it (one
    /// token tile: each weight read and unpacked once), split over k; else the tensor-core
    /// mat-vec.
    pub f16_decode: bool,
    /// `FERROLM_F16_DECODE_ROWS`: the fewest rows of such a step (2-64); `None`:
    /// [`F16_DECODE_MIN_ROWS`](super::F16_DECODE_MIN_ROWS).
    pub f16_decode_rows: Option<usize>,
    /// `FERROLM_F16_DECODE_SPLITS`: the k shares of those products (1-16); `None`: the
    /// plan's choice by the SMs their tiles leave idle.
    pub f16_decode_splits: Option<usize>,
    /// `FERROLM_F16_DECODE_SHARE_BLOCKS`: the fewest super-blocks a share of that split keeps
    /// for the GEMM to take the product (1-64); `None`:
    /// [`F16_DECODE_MIN_SHARE_BLOCKS`](super::F16_DECODE_MIN_SHARE_BLOCKS).
    pub f16_decode_share_blocks: Option<usize>,
    /// `FERROLM_GEMM_F32_TOKEN_WARPS`: the f32 GEMM's warps along the tokens a block (1-4;
    /// `None`: 4, where the tokens fill them), beside its 4 along the rows; the same bits.
    pub gemm_f32_token_warps: Option<usize>,
    /// `FERROLM_F16_DECODE_FIRST` (on; `=0` off): where a batched step's product would take
    /// either, the f16 GEMM above ahead of the f16 mat-vec (qwen3-8b's gate and up at 48-64
    /// rows: 43 µs a launch against 52 in session 30's ncu; S_TG at 64 sequences +5% in
    /// session 31).
    pub f16_decode_first: bool,
    /// `FERROLM_F16_DECODE_DEEP=1`: that GEMM keeps three super-blocks of weights in flight
    /// an SM (x stages sized for its 64 tokens, two f16 stages, four raw slots) where it keeps
    /// one (qwen3-8b's 64-row gate and up: 40.5 µs a launch at 28% of DRAM, session 41's ncu,
    /// paced by one 37 KB copy at a time). The same bits. Off: measured -3.4% at 64 sequences,
    /// -2.7% with the pair (session 43, H100).
    pub f16_decode_deep: bool,
    /// `FERROLM_F16_DECODE_PAIR=1`: gate and up, where each takes that GEMM, in one launch of
    /// it, split as their tiles together say (qwen3-8b at 64 rows: 96 tiles unsplit, where
    /// each alone is 48 tiles in two shares, one launch and two split sums fewer). Each output
    /// the bits of its own launch split the same ways. On since session 43 (qwen3-8b's S_TG at
    /// 64 sequences +6.9% on the H100, 1.42 -> 1.52x llama.cpp).
    pub f16_decode_pair: bool,
    /// `FERROLM_F16_EXPERTS_PAIRS`: the fewest pairs an expert, on average, for which the
    /// experts take the f16 GEMMs (1-65535); `None`:
    /// [`F16_UNPACKED_EXPERTS_MIN_PAIRS`](super::F16_UNPACKED_EXPERTS_MIN_PAIRS) where gate and
    /// up are unpacked in the GEMM, else [`F16_EXPERTS_MIN_PAIRS`](super::F16_EXPERTS_MIN_PAIRS).
    pub f16_experts_pairs: Option<usize>,
    /// `FERROLM_MMVQ_MMA`: a batched decode step's 2-64 rows on the tensor-core mat-vec
    /// (`mmvq_mma.cu`, weights read once into MMA fragments), where its format has one; else
    /// the mat-vec (up to 8 rows) or the GEMM.
    pub mma_matvec: bool,
    /// `FERROLM_MMVQ_MMA_TILES`: weight-row tiles of 16 a warp of that kernel takes (1 or 2;
    /// two exist from 33 rows, below which 2 means 1); `None`: the plan's choice by rows.
    pub mma_row_tiles: Option<usize>,
    /// `FERROLM_MMVQ_MMA_STAGED=1`: a batched decode step's products of
    /// `FERROLM_MMVQ_MMA_STAGED_ROWS` to 64 rows on the staged tensor-core mat-vec
    /// (`mmvq_staged.cu`: each super-block's activations in shared memory once for eight
    /// warps, k split over blocks), ahead of `mmvq_mma` and the f16 decode GEMM. Off until a
    /// device run measures it.
    pub mma_staged: bool,
    /// `FERROLM_MMVQ_MMA_STAGED_ROWS`: the fewest rows it takes (17-64); `None`:
    /// [`STAGED_DEFAULT_ROWS`](super::STAGED_DEFAULT_ROWS).
    pub mma_staged_rows: Option<usize>,
    /// `FERROLM_MMVQ_MMA_STAGED_SPLITS`: its k shares (1-16); `None`: the plan's choice by the
    /// SMs its row blocks leave idle.
    pub mma_staged_splits: Option<usize>,
    /// `FERROLM_F16_MATVEC` (on; `=0` off): a batched decode step's Q4_K and Q6_K products of
    /// 17 (33 for rows under 4096 elements) to 64 rows on the f16 mat-vec (`matvec_f16.cu`:
    /// each weight unpacked to f16 once for all the rows, the activations staged in shared
    /// memory, k split over blocks), ahead of every other decode product.
    pub f16_matvec: bool,
    /// `FERROLM_F16_MATVEC_ROWS`: the fewest rows it takes (1-64), whatever the width; `None`:
    /// [`F16_MATVEC_DEFAULT_ROWS`](super::F16_MATVEC_DEFAULT_ROWS) or
    /// [`F16_MATVEC_NARROW_ROWS`](super::F16_MATVEC_NARROW_ROWS) by the width.
    pub f16_matvec_rows: Option<usize>,
    /// `FERROLM_F16_MATVEC_SPLITS`: its k shares (1-16); `None`: the plan's choice by the SMs
    /// its row blocks leave idle.
    pub f16_matvec_splits: Option<usize>,
    /// `FERROLM_F16_MATVEC_Q6K_STAGE`: its Q6_K weights through shared memory (cp.async
    /// 16-byte chunks) instead of a lane's 16-bit loads, where rows lie 16 bytes apart; the
    /// same bits. On since session 34's device run (qwen3-8b S_TG +5% at 32 sequences, +3% at
    /// 64, H100).
    pub f16_matvec_q6k_stage: bool,
    /// `FERROLM_F16_MATVEC_Q4K_STAGE=1`: its Q4_K weights through shared memory too (a block's
    /// 128 rows of a super-block by cp.async, two stages, `matvec_f16_q4_k_ws_t<NT>`), where a
    /// warp's rows came into registers one super-block ahead (252 registers, 11% occupancy and
    /// 14% of DRAM on qwen3-8b's 64-row q/o, session 35's ncu; 218 registers staged). The same
    /// bits.
    pub f16_matvec_q4k_stage: bool,
    /// `FERROLM_F16_MATVEC_CLUSTER`: a split f16 mat-vec's row block (2-8 shares) launched
    /// as one thread-block cluster that adds its shares in the blocks' shared memory (sm_90),
    /// where each share went to a scratch in L2 and the row block's last share added them
    /// all. The same bits. On since session 41 (H100: qwen3-8b S_TG +4.5% at 64 sequences,
    /// +5.5% at 32).
    pub f16_matvec_cluster: bool,
    /// `FERROLM_F16_MATVEC_ONE`: consecutive products of one format and width on the f16
    /// mat-vec (a batched step's q, k and v) in one launch, split as their rows together say,
    /// where each took a launch of its own (qwen3-8b's k and v: 64 blocks a launch, half the
    /// SMs). Each output the bits of its own launch split the same ways. On since session 41
    /// (H100, with the cluster sum: qwen3-8b S_TG +9.7% at 64 sequences, +12% at 32).
    pub f16_matvec_one: bool,
    /// `FERROLM_F16_MATVEC_OCCUPANCY=1`: the f16 mat-vec's split rule counts the blocks an SM
    /// holds of the product's format (Q4_K two, Q6_K's eight-warp blocks one) where it counted
    /// two for both: qwen3-8b's 64-row Q6_K down then splits 4 ways into one wave of 128
    /// blocks, not 8 into two waves of 256. Off: measured 3.7% slower at 64 sequences
    /// (session 43, H100).
    pub f16_matvec_occupancy: bool,
    /// `FERROLM_F16_COPY`: a batched step's norms and SwiGLU write the f16 copy of their
    /// output that the f16 products after them take (else `round_f16` makes it in a launch of
    /// its own). The same bits.
    pub f16_copy: bool,
    /// `FERROLM_MOE_MMA`: a batched decode step's experts on the tensor-core mat-vec
    /// (`moe_mma.cu`: each expert's weights read once into MMA fragments for its few pairs)
    /// where both formats have one; else the decode kernels (up to 8 tokens) or the GEMM.
    pub moe_mma: bool,
    /// `FERROLM_MOE_STEP_FUSE`: a batched step's MoE launch cuts, each the same bytes as the
    /// launches it saves: the experts' index by one block, x taken from the norm's blocks (and
    /// only with `fuse`).
    pub moe_step_fuse: bool,
    /// `FERROLM_MOE_MMA_TILES`: column tiles of 8 pairs that kernel takes a pass (1, 2 or 4);
    /// `None`: the plan's choice by pairs an expert.
    pub moe_mma_tiles: Option<usize>,
    /// `FERROLM_MOE_MMA_PAIRS`: the most pairs an expert, on average, for which a step's
    /// experts take that kernel (1-64); `None`: [`MOE_MMA_MAX_PAIRS`](super::MOE_MMA_MAX_PAIRS).
    pub moe_mma_pairs: Option<usize>,
    /// `FERROLM_CUDA_PROFILE`: stage timing from CUDA events (turns graphs off).
    pub profile: bool,
    /// `FERROLM_TIMING_SKIP=a,b`: kernels whose names start with one of these are not launched.
    /// For timing only (what a kernel costs the step's chain of launches under PDL and graphs,
    /// which ncu's one launch at a time does not show); the outputs are wrong.
    pub timing_skip: Vec<String>,
}

impl Default for Switches {
    fn default() -> Self {
        Self {
            mmq: true,
            fuse: true,
            norm_route: true,
            norm_route_rows: None,
            norm_route_cluster: false,
            rope_store: false,
            attn_rope: true,
            attn_rope_rows: true,
            attn_head_split: true,
            attn_bulk: true,
            qkv_one: true,
            norm_in_qkv: false,
            norm_in_glu: false,
            graphs: true,
            attn_mma: None,
            attn_ggml_small: true,
            int_scales: None,
            mmq_tile: None,
            q8_0_lanes: true,
            moe_grouped: true,
            mmvq_wide: true,
            moe_fused: true,
            moe_gate_up_warps: None,
            moe_down_prefetch: false,
            moe_h_in_gate_up: false,
            moe_rows_l1: false,
            moe_tight: 2,
            moe_down_early: true,
            moe_bulk_l2: false,
            moe_down_direct: true,
            moe_gate_up_direct: true,
            moe_lean: true,
            route_topk_block: true,
            route_keep_sums: true,
            route_spread_out: false,
            head_norm_regs: true,
            norm_exact: true,
            q8k: true,
            attn_grouped: true,
            attn_tc: true,
            attn_combine_walk: false,
            attn_combine_q8k: true,
            attn_split_keys: None,
            rows_split_keys: None,
            kv_block: None,
            kv_pool: true,
            pinned_logits: true,
            greedy_on_device: true,
            attn_batched: true,
            rope_table: true,
            pdl: true,
            carveout: None,
            prefetch_max_mb: None,
            l2_ahead: 0,
            l2_ahead_blocks: 32,
            prefetch: false,
            prefetch_l1: false,
            stage: false,
            split_k: true,
            gemm_f16: true,
            gemm_f16_unpack: true,
            f16_decode: true,
            f16_decode_rows: None,
            f16_decode_splits: None,
            f16_decode_share_blocks: None,
            gemm_f32_token_warps: None,
            f16_decode_first: true,
            f16_decode_deep: false,
            f16_decode_pair: true,
            f16_experts_pairs: None,
            mma_matvec: true,
            mma_row_tiles: None,
            mma_staged: false,
            mma_staged_rows: None,
            mma_staged_splits: None,
            f16_matvec: true,
            f16_matvec_rows: None,
            f16_matvec_splits: None,
            f16_matvec_q6k_stage: true,
            f16_matvec_q4k_stage: false,
            f16_matvec_cluster: true,
            f16_matvec_one: true,
            f16_matvec_occupancy: false,
            f16_copy: true,
            moe_mma: true,
            moe_step_fuse: true,
            moe_mma_tiles: None,
            moe_mma_pairs: None,
            profile: false,
            timing_skip: Vec::new(),
        }
    }
}

/// The environment's value for a name; trimmed, and empty is unset.
fn value(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn bad(name: &str, v: &str, want: &str) -> CudaError {
    CudaError::Invalid(format!("{name}={v}: want {want}"))
}

/// `0` or `1`; unset is `default`.
fn flag(env: &dyn Fn(&str) -> Option<String>, name: &str, default: bool) -> Result<bool> {
    match value(env, name).as_deref() {
        None => Ok(default),
        Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => {
            let (on, off) = if default {
                (", the default", "")
            } else {
                ("", ", the default")
            };
            Err(bad(name, v, &format!("0 (off{off}) or 1 (on{on})")))
        }
    }
}

/// `0` or `1` forces; unset (or `auto` where `auto_ok`) leaves the choice to the plan.
fn forced(env: &dyn Fn(&str) -> Option<String>, name: &str, auto_ok: bool) -> Result<Option<bool>> {
    match value(env, name).as_deref() {
        None => Ok(None),
        Some("auto") if auto_ok => Ok(None),
        Some("0") => Ok(Some(false)),
        Some("1") => Ok(Some(true)),
        Some(v) => {
            let auto = if auto_ok { ", auto" } else { "" };
            Err(bad(
                name,
                v,
                &format!("0, 1{auto} or unset (chosen by rows)"),
            ))
        }
    }
}

/// A whole number in `range`; unset or `auto` is `None`.
/// A comma-separated list of kernel names (or their starts); unset is empty.
fn names(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Vec<String>> {
    let Some(v) = value(env, name) else {
        return Ok(Vec::new());
    };
    let list: Vec<String> = v.split(',').map(|s| s.trim().to_owned()).collect();
    let kernel_name =
        |s: &String| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if list.iter().all(kernel_name) {
        Ok(list)
    } else {
        Err(bad(
            name,
            &v,
            "kernel names (or their starts), comma-separated",
        ))
    }
}

fn count(
    env: &dyn Fn(&str) -> Option<String>,
    name: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<Option<usize>> {
    match value(env, name).as_deref() {
        None | Some("auto") => Ok(None),
        Some(v) => match v.parse() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => {
                let want = format!(
                    "auto (the default) or a whole number from {} to {}",
                    range.start(),
                    range.end()
                );
                Err(bad(name, v, &want))
            }
        },
    }
}

/// The tile named by `FERROLM_MMQ_TILE` (`None`: auto).
pub fn tile_from_env(v: Option<&str>) -> Result<Option<usize>> {
    match v.map(str::trim) {
        None | Some("") | Some("auto") => Ok(None),
        Some(v) => match MMQ_TILES.iter().position(|t| t.name == v) {
            Some(i) => Ok(Some(i)),
            None => Err(bad(
                "FERROLM_MMQ_TILE",
                v,
                &format!("auto, {}", MMQ_TILES.map(|t| t.name).join(", ")),
            )),
        },
    }
}

impl Switches {
    /// Every switch from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::parse(&|name| std::env::var(name).ok())
    }

    /// Every switch from `env` (a name to its value, `None` when unset).
    pub fn parse(env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let attn_ggml_small = match value(env, "FERROLM_ATTN").as_deref() {
            None | Some("ggml") => true,
            Some("f32") => false,
            Some(v) => return Err(bad("FERROLM_ATTN", v, "f32, or ggml (the default)")),
        };
        Ok(Self {
            mmq: flag(env, "FERROLM_CUDA_MMQ", true)?,
            fuse: flag(env, "FERROLM_CUDA_FUSE", true)?,
            norm_route: flag(env, "FERROLM_NORM_ROUTE", true)?,
            norm_route_rows: count(env, "FERROLM_NORM_ROUTE_ROWS", 1..=8)?,
            norm_route_cluster: flag(env, "FERROLM_NORM_ROUTE_CLUSTER", false)?,
            rope_store: flag(env, "FERROLM_ROPE_STORE", false)?,
            attn_rope: flag(env, "FERROLM_ATTN_ROPE", true)?,
            attn_rope_rows: flag(env, "FERROLM_ATTN_ROPE_ROWS", true)?,
            attn_head_split: flag(env, "FERROLM_ATTN_HEAD_SPLIT", true)?,
            attn_bulk: flag(env, "FERROLM_ATTN_BULK", true)?,
            qkv_one: flag(env, "FERROLM_QKV_ONE", true)?,
            norm_in_qkv: flag(env, "FERROLM_NORM_IN_QKV", false)?,
            norm_in_glu: flag(env, "FERROLM_NORM_IN_GLU", false)?,
            graphs: flag(env, "FERROLM_CUDA_GRAPH", true)?,
            attn_mma: forced(env, "FERROLM_ATTN_MMA", true)?,
            attn_ggml_small,
            int_scales: forced(env, "FERROLM_CUDA_INT_SCALES", false)?,
            mmq_tile: tile_from_env(value(env, "FERROLM_MMQ_TILE").as_deref())?,
            q8_0_lanes: flag(env, "FERROLM_CUDA_Q8_0_LANES", true)?,
            moe_grouped: flag(env, "FERROLM_MOE_GROUPED", true)?,
            mmvq_wide: flag(env, "FERROLM_MMVQ_WIDE", true)?,
            moe_fused: flag(env, "FERROLM_MOE_FUSED", true)?,
            moe_gate_up_warps: count(env, "FERROLM_MOE_GATE_UP_WARPS", 1..=8)?,
            moe_down_prefetch: flag(env, "FERROLM_MOE_DOWN_PREFETCH", false)?,
            moe_h_in_gate_up: flag(env, "FERROLM_MOE_H_IN_GATE_UP", false)?,
            moe_rows_l1: flag(env, "FERROLM_MOE_ROWS_L1", false)?,
            moe_tight: count(env, "FERROLM_MOE_TIGHT", 0..=3)?.unwrap_or(2),
            moe_down_early: flag(env, "FERROLM_MOE_DOWN_EARLY", true)?,
            moe_bulk_l2: flag(env, "FERROLM_MOE_BULK_L2", false)?,
            moe_down_direct: flag(env, "FERROLM_MOE_DOWN_DIRECT", true)?,
            moe_gate_up_direct: flag(env, "FERROLM_MOE_GATE_UP_DIRECT", true)?,
            moe_lean: flag(env, "FERROLM_MOE_LEAN", true)?,
            route_topk_block: flag(env, "FERROLM_ROUTE_TOPK_BLOCK", true)?,
            route_keep_sums: flag(env, "FERROLM_ROUTE_KEEP_SUMS", true)?,
            route_spread_out: flag(env, "FERROLM_ROUTE_SPREAD_OUT", false)?,
            head_norm_regs: flag(env, "FERROLM_QK_NORM_REGS", true)?,
            norm_exact: flag(env, "FERROLM_NORM_EXACT", true)?,
            q8k: flag(env, "FERROLM_CUDA_Q8K", true)?,
            attn_grouped: flag(env, "FERROLM_ATTN_GROUPED", true)?,
            attn_tc: flag(env, "FERROLM_ATTN_TC", true)?,
            attn_combine_walk: flag(env, "FERROLM_ATTN_COMBINE_WALK", false)?,
            attn_combine_q8k: flag(env, "FERROLM_ATTN_COMBINE_Q8K", true)?,
            attn_split_keys: count(env, "FERROLM_ATTN_SPLIT_KEYS", 16..=65536)?,
            rows_split_keys: count(env, "FERROLM_ROWS_SPLIT_KEYS", 16..=65536)?,
            kv_block: match count(env, "FERROLM_KV_BLOCK", 16..=1 << 20)? {
                Some(n) if !n.is_power_of_two() => {
                    let want = "auto or a power of two from 16 to 1048576";
                    return Err(bad("FERROLM_KV_BLOCK", &n.to_string(), want));
                }
                b => b,
            },
            kv_pool: flag(env, "FERROLM_KV_POOL", true)?,
            pinned_logits: flag(env, "FERROLM_PINNED_LOGITS", true)?,
            greedy_on_device: flag(env, "FERROLM_GREEDY_ON_DEVICE", true)?,
            attn_batched: flag(env, "FERROLM_ATTN_BATCHED", true)?,
            rope_table: flag(env, "FERROLM_ROPE_TABLE", true)?,
            pdl: flag(env, "FERROLM_CUDA_PDL", true)?,
            carveout: count(env, "FERROLM_CUDA_CARVEOUT", 0..=100)?,
            prefetch: flag(env, "FERROLM_CUDA_PREFETCH", false)?,
            prefetch_l1: flag(env, "FERROLM_CUDA_PREFETCH_L1", false)?,
            prefetch_max_mb: count(env, "FERROLM_CUDA_PREFETCH_MAX_MB", 0..=1024)?,
            l2_ahead: count(env, "FERROLM_L2_AHEAD", 0..=3)?.unwrap_or(0),
            l2_ahead_blocks: count(env, "FERROLM_L2_AHEAD_BLOCKS", 1..=128)?.unwrap_or(32),
            stage: flag(env, "FERROLM_MMVQ_STAGE", false)?,
            split_k: flag(env, "FERROLM_MMQ_SPLIT_K", true)?,
            gemm_f16: flag(env, "FERROLM_GEMM_F16", true)?,
            gemm_f16_unpack: flag(env, "FERROLM_GEMM_F16_UNPACK", true)?,
            f16_decode: flag(env, "FERROLM_F16_DECODE", true)?,
            f16_decode_rows: count(env, "FERROLM_F16_DECODE_ROWS", 2..=64)?,
            f16_decode_splits: count(env, "FERROLM_F16_DECODE_SPLITS", 1..=16)?,
            f16_decode_share_blocks: count(env, "FERROLM_F16_DECODE_SHARE_BLOCKS", 1..=64)?,
            gemm_f32_token_warps: count(env, "FERROLM_GEMM_F32_TOKEN_WARPS", 1..=4)?,
            f16_decode_first: flag(env, "FERROLM_F16_DECODE_FIRST", true)?,
            f16_decode_deep: flag(env, "FERROLM_F16_DECODE_DEEP", false)?,
            f16_decode_pair: flag(env, "FERROLM_F16_DECODE_PAIR", true)?,
            f16_experts_pairs: count(env, "FERROLM_F16_EXPERTS_PAIRS", 1..=65535)?,
            mma_matvec: flag(env, "FERROLM_MMVQ_MMA", true)?,
            mma_row_tiles: count(env, "FERROLM_MMVQ_MMA_TILES", 1..=2)?,
            mma_staged: flag(env, "FERROLM_MMVQ_MMA_STAGED", false)?,
            mma_staged_rows: count(env, "FERROLM_MMVQ_MMA_STAGED_ROWS", 17..=64)?,
            mma_staged_splits: count(env, "FERROLM_MMVQ_MMA_STAGED_SPLITS", 1..=16)?,
            f16_matvec: flag(env, "FERROLM_F16_MATVEC", true)?,
            f16_matvec_rows: count(env, "FERROLM_F16_MATVEC_ROWS", 1..=64)?,
            f16_matvec_splits: count(env, "FERROLM_F16_MATVEC_SPLITS", 1..=16)?,
            f16_matvec_q6k_stage: flag(env, "FERROLM_F16_MATVEC_Q6K_STAGE", true)?,
            f16_matvec_q4k_stage: flag(env, "FERROLM_F16_MATVEC_Q4K_STAGE", false)?,
            f16_matvec_cluster: flag(env, "FERROLM_F16_MATVEC_CLUSTER", true)?,
            f16_matvec_one: flag(env, "FERROLM_F16_MATVEC_ONE", true)?,
            f16_matvec_occupancy: flag(env, "FERROLM_F16_MATVEC_OCCUPANCY", false)?,
            f16_copy: flag(env, "FERROLM_F16_COPY", true)?,
            moe_mma: flag(env, "FERROLM_MOE_MMA", true)?,
            moe_step_fuse: flag(env, "FERROLM_MOE_STEP_FUSE", true)?,
            moe_mma_tiles: match count(env, "FERROLM_MOE_MMA_TILES", 1..=4)? {
                Some(3) => return Err(bad("FERROLM_MOE_MMA_TILES", "3", "auto, 1, 2 or 4")),
                t => t,
            },
            moe_mma_pairs: count(env, "FERROLM_MOE_MMA_PAIRS", 1..=64)?,
            profile: flag(env, "FERROLM_CUDA_PROFILE", false)?,
            timing_skip: names(env, "FERROLM_TIMING_SKIP")?,
        })
    }
}

/// `0`/`1`, as the variable is set.
fn bit(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

fn tri(v: Option<bool>) -> &'static str {
    v.map_or("auto", bit)
}

/// A count as set, or `auto` (a [`count`] switch left to the plan).
fn count_or_auto(v: Option<usize>) -> String {
    v.map_or("auto".to_owned(), |k| k.to_string())
}

/// One line a switch: `NAME=value  what it does`.
impl fmt::Display for Switches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tile = self.mmq_tile.map_or("auto", |i| MMQ_TILES[i].name);
        let attn = if self.attn_ggml_small { "ggml" } else { "f32" };
        let split_keys = count_or_auto(self.attn_split_keys);
        let rows_keys = count_or_auto(self.rows_split_keys);
        let kv_block = count_or_auto(self.kv_block);
        let f16_pairs = count_or_auto(self.f16_experts_pairs);
        let row_tiles = count_or_auto(self.mma_row_tiles);
        let staged_rows = count_or_auto(self.mma_staged_rows);
        let staged_splits = count_or_auto(self.mma_staged_splits);
        let f16_mv_rows = count_or_auto(self.f16_matvec_rows);
        let f16_mv_splits = count_or_auto(self.f16_matvec_splits);
        let moe_tiles = count_or_auto(self.moe_mma_tiles);
        let moe_pairs = count_or_auto(self.moe_mma_pairs);
        let gate_up_warps = count_or_auto(self.moe_gate_up_warps);
        let decode_rows = count_or_auto(self.f16_decode_rows);
        let decode_splits = count_or_auto(self.f16_decode_splits);
        let decode_share = count_or_auto(self.f16_decode_share_blocks);
        let f32_token_warps = count_or_auto(self.gemm_f32_token_warps);
        let carveout = count_or_auto(self.carveout);
        let prefetch_max = count_or_auto(self.prefetch_max_mb);
        let l2_blocks = self.l2_ahead_blocks.to_string();
        let timing_skip = if self.timing_skip.is_empty() {
            "none".to_owned()
        } else {
            self.timing_skip.join(",")
        };
        let norm_route_rows = count_or_auto(self.norm_route_rows);
        let lines: [(&str, &str, &str); 90] = [
            (
                "FERROLM_CUDA_MMQ",
                bit(self.mmq),
                "int8 GEMM above 8 rows (0: mat-vec slices)",
            ),
            ("FERROLM_CUDA_FUSE", bit(self.fuse), "decode fusions"),
            (
                "FERROLM_NORM_ROUTE",
                bit(self.norm_route),
                "the MoE norm in the router's launch",
            ),
            (
                "FERROLM_NORM_ROUTE_ROWS",
                &norm_route_rows,
                "the most tokens it takes",
            ),
            (
                "FERROLM_NORM_ROUTE_CLUSTER",
                bit(self.norm_route_cluster),
                "that launch as one thread-block cluster (sm_90)",
            ),
            (
                "FERROLM_ROPE_STORE",
                bit(self.rope_store),
                "the KV store in the RoPE launch",
            ),
            (
                "FERROLM_ATTN_ROPE",
                bit(self.attn_rope),
                "one token's q/k norms, RoPE and KV store in the decode walk",
            ),
            (
                "FERROLM_ATTN_ROPE_ROWS",
                bit(self.attn_rope_rows),
                "the same for whole-row q/k norms, on the group block",
            ),
            (
                "FERROLM_ATTN_HEAD_SPLIT",
                bit(self.attn_head_split),
                "the rotating walk's groups of 8 heads in two blocks",
            ),
            (
                "FERROLM_ATTN_BULK",
                bit(self.attn_bulk),
                "the whole-row walk's tiles by bulk copies",
            ),
            (
                "FERROLM_QKV_ONE",
                bit(self.qkv_one),
                "one token's q, k and v in one launch",
            ),
            (
                "FERROLM_NORM_IN_QKV",
                bit(self.norm_in_qkv),
                "the attention's norm in that launch",
            ),
            (
                "FERROLM_NORM_IN_GLU",
                bit(self.norm_in_glu),
                "the FFN's norm in one token's gate/up launch",
            ),
            (
                "FERROLM_CUDA_GRAPH",
                bit(self.graphs),
                "decode steps as CUDA graphs",
            ),
            (
                "FERROLM_ATTN_MMA",
                tri(self.attn_mma),
                "prefill attention: 1 tensor cores, 0 scalar",
            ),
            (
                "FERROLM_ATTN",
                attn,
                "attention under 64 rows: ggml's f16 arithmetic or f32",
            ),
            (
                "FERROLM_CUDA_INT_SCALES",
                tri(self.int_scales),
                "Q4_K GEMM in the CPU's order",
            ),
            ("FERROLM_MMQ_TILE", tile, "GEMM tile shape"),
            (
                "FERROLM_CUDA_Q8_0_LANES",
                bit(self.q8_0_lanes),
                "short Q8_0/Q5_0 GEMMs on 8 lanes",
            ),
            (
                "FERROLM_MOE_GROUPED",
                bit(self.moe_grouped),
                "MoE GEMM: one launch for all experts",
            ),
            (
                "FERROLM_MMVQ_WIDE",
                bit(self.mmvq_wide),
                "wide mat-vec and MoE decode walks",
            ),
            (
                "FERROLM_MOE_FUSED",
                bit(self.moe_fused),
                "MoE decode on the fused kernels",
            ),
            (
                "FERROLM_MOE_GATE_UP_WARPS",
                &gate_up_warps,
                "warps a block of the MoE decode gate/up kernel",
            ),
            (
                "FERROLM_MOE_DOWN_PREFETCH",
                bit(self.moe_down_prefetch),
                "MoE decode gate/up asks L2 for the down weights (sm_90)",
            ),
            (
                "FERROLM_MOE_H_IN_GATE_UP",
                bit(self.moe_h_in_gate_up),
                "one token's MoE gate/up launch quantizes h for down",
            ),
            (
                "FERROLM_MOE_ROWS_L1",
                bit(self.moe_rows_l1),
                "MoE decode warps ask L1 for their rows first",
            ),
            (
                "FERROLM_MOE_TIGHT",
                ["0", "1", "2", "3"][self.moe_tight & 3],
                "one token's MoE kernels four blocks an SM (1 gate/up, 2 down)",
            ),
            (
                "FERROLM_MOE_DOWN_EARLY",
                bit(self.moe_down_early),
                "one token's MoE down rows asked for before the wait",
            ),
            (
                "FERROLM_MOE_BULK_L2",
                bit(self.moe_bulk_l2),
                "one token's MoE rows asked of L2 in bulk",
            ),
            (
                "FERROLM_MOE_DOWN_DIRECT",
                bit(self.moe_down_direct),
                "one token's MoE down tasks dealt straight to warps",
            ),
            (
                "FERROLM_MOE_GATE_UP_DIRECT",
                bit(self.moe_gate_up_direct),
                "one token's MoE gate/up slot walked straight away",
            ),
            (
                "FERROLM_MOE_LEAN",
                bit(self.moe_lean),
                "one token's K-quant experts in the lean shape",
            ),
            (
                "FERROLM_ROUTE_TOPK_BLOCK",
                bit(self.route_topk_block),
                "one token's router top-k by a whole block",
            ),
            (
                "FERROLM_ROUTE_KEEP_SUMS",
                bit(self.route_keep_sums),
                "the router's residual write-back from shared memory",
            ),
            (
                "FERROLM_ROUTE_SPREAD_OUT",
                bit(self.route_spread_out),
                "the router's norm outputs a share a block, after its count",
            ),
            (
                "FERROLM_QK_NORM_REGS",
                bit(self.head_norm_regs),
                "per-head q/k norms rotated in registers",
            ),
            (
                "FERROLM_NORM_EXACT",
                bit(self.norm_exact),
                "the fused norm on exact rows, Q8_K from shared memory",
            ),
            (
                "FERROLM_CUDA_Q8K",
                bit(self.q8k),
                "Q8_K activations for K-quants",
            ),
            (
                "FERROLM_ATTN_GROUPED",
                bit(self.attn_grouped),
                "decode attention by KV group",
            ),
            (
                "FERROLM_ATTN_TC",
                bit(self.attn_tc),
                "decode by KV group on the tensor cores",
            ),
            (
                "FERROLM_ATTN_COMBINE_WALK",
                bit(self.attn_combine_walk),
                "decode attention's splits combined in the walk's launch",
            ),
            (
                "FERROLM_ATTN_COMBINE_Q8K",
                bit(self.attn_combine_q8k),
                "decode attention's own combine quantizes its output as Q8_K",
            ),
            (
                "FERROLM_ATTN_SPLIT_KEYS",
                &split_keys,
                "decode attention: keys a split at full context",
            ),
            (
                "FERROLM_ROWS_SPLIT_KEYS",
                &rows_keys,
                "batched decode attention: keys a split",
            ),
            (
                "FERROLM_KV_BLOCK",
                &kv_block,
                "positions a block of the paged KV cache",
            ),
            (
                "FERROLM_KV_POOL",
                bit(self.kv_pool),
                "sequences share one pool of KV blocks",
            ),
            (
                "FERROLM_PINNED_LOGITS",
                bit(self.pinned_logits),
                "logits copied into page-locked host memory",
            ),
            (
                "FERROLM_GREEDY_ON_DEVICE",
                bit(self.greedy_on_device),
                "greedy choices picked on the GPU",
            ),
            (
                "FERROLM_ATTN_BATCHED",
                bit(self.attn_batched),
                "decode attention of a batch's sequences in one launch",
            ),
            (
                "FERROLM_ROPE_TABLE",
                bit(self.rope_table),
                "RoPE cos/sin once a pass, read by every layer",
            ),
            (
                "FERROLM_CUDA_PDL",
                bit(self.pdl),
                "programmatic dependent launch (sm_90+)",
            ),
            (
                "FERROLM_CUDA_CARVEOUT",
                &carveout,
                "every kernel's shared-memory carveout, percent",
            ),
            (
                "FERROLM_CUDA_PREFETCH",
                bit(self.prefetch),
                "mat-vec weights to L2 before the wait (with PDL)",
            ),
            (
                "FERROLM_CUDA_PREFETCH_L1",
                bit(self.prefetch_l1),
                "that prefetch into L1",
            ),
            (
                "FERROLM_CUDA_PREFETCH_MAX_MB",
                &prefetch_max,
                "that prefetch for mat-vecs of at most this many MB alone",
            ),
            (
                "FERROLM_L2_AHEAD",
                ["0", "1", "2", "3"][self.l2_ahead.min(3)],
                "a kernel beside one token's step asks L2 for the next layer (1 lines, 2 bulk)",
            ),
            (
                "FERROLM_L2_AHEAD_BLOCKS",
                &l2_blocks,
                "that kernel's blocks of one warp",
            ),
            (
                "FERROLM_MMVQ_STAGE",
                bit(self.stage),
                "wide mat-vecs read activations from shared memory",
            ),
            (
                "FERROLM_MMQ_SPLIT_K",
                bit(self.split_k),
                "GEMMs that leave SMs idle split k",
            ),
            (
                "FERROLM_GEMM_F16",
                bit(self.gemm_f16),
                "long ubatches on the f16 wgmma GEMM (Hopper)",
            ),
            (
                "FERROLM_GEMM_F16_UNPACK",
                bit(self.gemm_f16_unpack),
                "the f16 GEMM unpacks Q4_K weights itself (no f16 copy)",
            ),
            (
                "FERROLM_F16_DECODE",
                bit(self.f16_decode),
                "batched decode's Q4_K products on the f16 GEMM, unpacked",
            ),
            (
                "FERROLM_F16_DECODE_ROWS",
                &decode_rows,
                "fewest rows of a batched step for that",
            ),
            (
                "FERROLM_F16_DECODE_SPLITS",
                &decode_splits,
                "k shares of those products",
            ),
            (
                "FERROLM_F16_DECODE_SHARE_BLOCKS",
                &decode_share,
                "fewest super-blocks a share of that split keeps",
            ),
            (
                "FERROLM_GEMM_F32_TOKEN_WARPS",
                &f32_token_warps,
                "f32 GEMM's warps along the tokens a block",
            ),
            (
                "FERROLM_F16_DECODE_FIRST",
                bit(self.f16_decode_first),
                "that GEMM ahead of the f16 mat-vec where both take a product",
            ),
            (
                "FERROLM_F16_DECODE_DEEP",
                bit(self.f16_decode_deep),
                "that GEMM keeps three super-blocks of weights in flight",
            ),
            (
                "FERROLM_F16_DECODE_PAIR",
                bit(self.f16_decode_pair),
                "gate and up in one launch of that GEMM",
            ),
            (
                "FERROLM_F16_EXPERTS_PAIRS",
                &f16_pairs,
                "fewest pairs an expert for the f16 expert GEMMs",
            ),
            (
                "FERROLM_MMVQ_MMA",
                bit(self.mma_matvec),
                "batched decode's 2-64 rows on the tensor-core mat-vec",
            ),
            (
                "FERROLM_MMVQ_MMA_TILES",
                &row_tiles,
                "16-row tiles a warp of the tensor-core mat-vec takes",
            ),
            (
                "FERROLM_MMVQ_MMA_STAGED",
                bit(self.mma_staged),
                "batched decode's 33-64 rows (_ROWS) on the staged MMA mat-vec",
            ),
            (
                "FERROLM_MMVQ_MMA_STAGED_ROWS",
                &staged_rows,
                "fewest rows of a batched step for that",
            ),
            (
                "FERROLM_MMVQ_MMA_STAGED_SPLITS",
                &staged_splits,
                "k shares of the staged mat-vec",
            ),
            (
                "FERROLM_F16_MATVEC",
                bit(self.f16_matvec),
                "batched decode's Q4_K/Q6_K 17-64 rows (33 under 4096 wide; _ROWS) on the f16 mat-vec",
            ),
            (
                "FERROLM_F16_MATVEC_ROWS",
                &f16_mv_rows,
                "fewest rows of a batched step for that",
            ),
            (
                "FERROLM_F16_MATVEC_SPLITS",
                &f16_mv_splits,
                "k shares of the f16 mat-vec",
            ),
            (
                "FERROLM_F16_MATVEC_Q6K_STAGE",
                bit(self.f16_matvec_q6k_stage),
                "the f16 mat-vec's Q6_K weights through shared memory",
            ),
            (
                "FERROLM_F16_MATVEC_Q4K_STAGE",
                bit(self.f16_matvec_q4k_stage),
                "the f16 mat-vec's Q4_K weights through shared memory",
            ),
            (
                "FERROLM_F16_MATVEC_CLUSTER",
                bit(self.f16_matvec_cluster),
                "the f16 mat-vec's shares added in a cluster",
            ),
            (
                "FERROLM_F16_MATVEC_ONE",
                bit(self.f16_matvec_one),
                "q, k and v in one f16 mat-vec launch",
            ),
            (
                "FERROLM_F16_MATVEC_OCCUPANCY",
                bit(self.f16_matvec_occupancy),
                "the f16 mat-vec's splits by its format's blocks an SM",
            ),
            (
                "FERROLM_F16_COPY",
                bit(self.f16_copy),
                "batched norms and SwiGLU write their output's f16 copy",
            ),
            (
                "FERROLM_MOE_MMA",
                bit(self.moe_mma),
                "batched decode's experts on the tensor-core mat-vec",
            ),
            (
                "FERROLM_MOE_STEP_FUSE",
                bit(self.moe_step_fuse),
                "batched MoE steps: one-block index, the norm's x",
            ),
            (
                "FERROLM_MOE_MMA_TILES",
                &moe_tiles,
                "8-pair column tiles a pass of the experts' mat-vec",
            ),
            (
                "FERROLM_MOE_MMA_PAIRS",
                &moe_pairs,
                "most pairs an expert (average) for the experts' mat-vec",
            ),
            (
                "FERROLM_CUDA_PROFILE",
                bit(self.profile),
                "stage timing (graphs off)",
            ),
            (
                "FERROLM_TIMING_SKIP",
                &timing_skip,
                "kernels not launched, by name start (timing only: wrong outputs)",
            ),
        ];
        for (name, v, what) in lines {
            writeln!(f, "{name:<24} {v:<8} {what}")?;
        }
        Ok(())
    }
}
