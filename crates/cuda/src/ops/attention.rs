//! `kernels/attention.cu`: the KV store (into `kv_cache.rs`'s [`KvCache`]) and flash-decoding;
//! `kernels/attention_prefill.cu`: the scalar tiled prefill, and the prefills in the CPU's
//! arithmetic for short ubatches (ggml's, and the CPU's f32 order);
//! `kernels/flash_attn.cu`: the tensor-core prefill. Which one runs a ubatch, and whether
//! decode combines its splits in the split kernel, is the plan's (`Plan::attention`).
//!
//! Every kernel takes a sliding window ([`window_arg`]: a query at position p sees keys
//! p - window < k <= p, as the CPU's attention; none sees every key from 0), and skips the
//! keys before it rather than masking them.
//!
//! Positions live in device memory (`CudaSlice<u32>`), so a captured graph replays with new
//! positions without re-capture; the split count of decode is fixed per [`DecodeWork`] for the
//! same reason (each split takes `ceil(n_keys / n_split)` keys, computed on the device).

use super::int;
use super::kv_cache::{KvCache, KvFormat};
use super::launch::Launcher;
use super::norm_rope::{check_rope, norm_threads, theta_scale, Rope, RopeArgs};
use super::Quantize;
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::{KernelFile, ATTENTION, ATTENTION_PREFILL, FLASH_ATTN};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use ferrolm_quant::QK_K;
use std::collections::HashMap;

/// Warps per attention block (the kernel's ATTN_NWARPS).
const NWARPS: usize = 4;
/// Head sizes whose combine can quantize its output as Q8_K (`attn_decode_combine_q8k_dD`: a
/// block of QK_K / D heads).
const COMBINE_Q8K_DIMS: [usize; 3] = [64, 128, 256];
/// Head sizes with a kernel instance: every one the CPU runs, to 256 (the tiny llama-family
/// goldens' 32, 64, Qwen-style and Phi's 80, 96, 128, deepseek2's key head 192 (128 + 64 RoPE,
/// its values padded to it), Gemma 3's 256). Each family takes them all (decode split and by
/// KV group, the batched rows, the scalar, F16Ref and F32Ref prefills), except the block
/// caches (whole 32-element blocks: not 80) and the tensor-core prefill ([`MMA_HEAD_DIMS`]).
pub const ATTN_HEAD_DIMS: [usize; 7] = [32, 64, 80, 96, 128, 192, 256];
/// Head sizes of the tensor-core prefill: at 192 and 256 its Q fragments and O accumulator
/// would not fit a thread's registers, and the plan runs the scalar prefill instead
/// (`Plan::prefill_kernel`).
pub const MMA_HEAD_DIMS: [usize; 5] = [32, 64, 80, 96, 128];
/// Query heads per KV head that `attn_decode_group_*` has instances for.
pub const ATTN_GROUPS: [usize; 4] = [1, 2, 4, 8];
/// Query heads per KV head that the tensor-core decode by KV group (`attn_decode_group_tc_*`,
/// `attn_decode_rows_tc_*`, attention_tc.cuh) has instances for.
pub const ATTN_TC_GROUPS: [usize; 2] = [4, 8];
/// Head sizes it has instances for: whole groups of eight 16-byte chunks (its swizzle).
pub const ATTN_TC_DIMS: [usize; 3] = [64, 128, 256];
/// Head sizes of the walks that norm and rotate their own queries and newest key
/// (`attn_decode_group_tc_rope_*`, `attn_decode_group_rope_row_*`): a head is one warp's 2 or 4
/// elements a lane, as the per-head norm's launch takes heads of these sizes (one 32-thread
/// block a head).
pub const ATTN_ROPE_DIMS: [usize; 2] = [64, 128];

/// What the rotating decode walk (`FERROLM_ATTN_ROPE`) takes besides the walk's own
/// arguments: the q/k/v products' k and v rows as they are, the per-head q and k norms'
/// weights, and the NEOX rotation's arguments. Its q is [`Attention::decode`]'s q, unrotated.
pub struct DecodeRotation<'a> {
    pub k: &'a CudaSlice<f32>,
    pub v: &'a CudaSlice<f32>,
    pub wq: &'a CudaSlice<f32>,
    pub wk: &'a CudaSlice<f32>,
    pub eps: f32,
    pub rope: &'a RopeArgs<'a>,
    /// On the tensor cores with 8 query heads a KV head: two blocks of 4 heads each
    /// (`attn_decode_group_tc_rope_d<D>_g8h2`, `FERROLM_ATTN_HEAD_SPLIT`).
    pub head_split: bool,
    /// On the group block (whole-row norms): the tiles by bulk copies
    /// (`attn_decode_group_rope_row_bulk_*`, `FERROLM_ATTN_BULK`; sm_90, the plan checks).
    pub bulk: bool,
}

impl DecodeRotation<'_> {
    /// Whether the rotating walk takes one token of this shape on `kernel`: an f16 cache, head
    /// sizes of [`ATTN_ROPE_DIMS`], a NEOX rotation, and on the tensor cores (their groups)
    /// per-head norms (weights of one head), on the group block one query head a KV head with
    /// whole-row norms (a weight an element of the row; rows whose norm block,
    /// `norm_threads`, is whole 128-thread blocks and a quarter of the row).
    pub fn takes(&self, cache: &KvCache, group: usize, kernel: DecodeKernel) -> bool {
        let hd = cache.head_dim;
        let (wq, wk) = (self.wq.len(), self.wk.len());
        // The norm launch's block a quarter of the row, whole 128-thread blocks of it, at most
        // 512 (AttnRotateRow::row_scales' ROW_MAX_VT blocks).
        let whole_rows = |w: usize| {
            let t = norm_threads(w) as usize;
            t.is_multiple_of(NWARPS * 32) && w == 4 * t && t <= 4 * NWARPS * 32
        };
        let norms = match kernel {
            DecodeKernel::GroupTensorCores => {
                DecodeKernel::has_tensor_cores(group, hd) && wq == hd && wk == hd
            }
            DecodeKernel::Group => {
                let width = cache.n_kv_head * hd;
                group == 1 && wq == width && wk == width && whole_rows(width)
            }
            DecodeKernel::Split => false,
        };
        norms
            && cache.format == KvFormat::F16
            && ATTN_ROPE_DIMS.contains(&hd)
            && self.rope.mode == Rope::Neox
            && self.k.len() == cache.n_kv_head * hd
            && self.v.len() == self.k.len()
    }
}

/// Shared memory the rotating walks take past their walk's: (whole-row norms) 32 f64 sums of
/// each row, then the queries [G][D] f32, then the newest key and value [D] f16.
fn rope_extra_bytes(head_dim: usize, group: usize, whole_rows: bool) -> usize {
    usize::from(whole_rows) * 2 * 32 * 8 + group * head_dim * 4 + 2 * head_dim * 2
}

/// Which flash-decoding kernel a launch takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeKernel {
    /// A block per (split, query head): `attn_decode_split_*`, every cache format.
    Split,
    /// A block per (split, KV head) for all the query heads that share it:
    /// `attn_decode_group_*` (f16 caches, the group sizes of [`ATTN_GROUPS`]).
    Group,
    /// The same on the tensor cores: `attn_decode_group_tc_*` (f16 caches,
    /// [`ATTN_TC_GROUPS`] × [`ATTN_TC_DIMS`]).
    GroupTensorCores,
}

impl DecodeKernel {
    /// [`DecodeKernel::Group`] where `grouped`, else [`DecodeKernel::Split`].
    pub fn from_grouped(grouped: bool) -> Self {
        if grouped {
            Self::Group
        } else {
            Self::Split
        }
    }

    /// Whether the tensor-core kernels have `group` query heads a KV head of `head_dim`.
    pub fn has_tensor_cores(group: usize, head_dim: usize) -> bool {
        ATTN_TC_GROUPS.contains(&group) && ATTN_TC_DIMS.contains(&head_dim)
    }
}

/// The most flash-decoding splits: the combine keeps a weight a split per head in shared
/// memory (attention_group.cuh's ATTN_MAX_SPLITS).
pub const ATTN_MAX_SPLITS: usize = 256;
/// flash_attn.cu's tile: FA_BQ query rows (16 per warp, FA_NWARPS warps) per block, and its
/// shared memory: FA_STAGES stages of a K and a V tile of FA_BK keys, rows padded by FA_PAD.
const FA_NWARPS: usize = 4;
const FA_BQ: usize = 16 * FA_NWARPS;
const FA_BK: usize = 64;
const FA_STAGES: usize = 2;
const FA_PAD: usize = 8;

/// attention_group.cuh's decode by KV group (one sequence's `attn_decode_group_*`, a batch's
/// `attn_decode_rows_*`): ATTN_GROUP_STAGES stages (two for heads over 128, so
/// that 256 with 8 heads a group fits sm_86/sm_89's 99 KiB a block) of a K and a V tile of
/// ATTN_GROUP_TILE f16 rows, then the G queries and the tile's G × ATTN_GROUP_TILE scores (f32).
const GROUP_STAGES: usize = 3;
const GROUP_TILE: usize = 32;

/// Bytes of the group kernels' combine scratch (attention_group.cuh's
/// ATTN_COMBINE_SCRATCH(G) floats: a 512-float reduction, 8 sums, a weight a split and head).
fn combine_scratch_bytes(group: usize) -> usize {
    (512 + 8 + group * ATTN_MAX_SPLITS) * 4
}

pub(super) fn group_smem_bytes(head_dim: usize, group: usize) -> usize {
    let stages = if head_dim > 128 { 2 } else { GROUP_STAGES };
    group_smem_bytes_staged(head_dim, group, stages)
}

/// attention_group.cuh's GroupLayout<D, G, stages>::BYTES: the stages, the queries and the
/// scores, or the combine's scratch (ATTN_COMBINE_SCRATCH(G) floats) where that is more.
pub(super) fn group_smem_bytes_staged(head_dim: usize, group: usize, stages: usize) -> usize {
    let tiles =
        stages * 2 * GROUP_TILE * head_dim * 2 + group * head_dim * 4 + group * GROUP_TILE * 4;
    let combine = combine_scratch_bytes(group);
    tiles.max(combine)
}

/// attention_tc.cuh's TcLayout<D, G, stages>::BYTES: the stages, q's two f16 terms for 8
/// heads (rows of D + 8), the scores' two halves (rows of 9 floats a key), P's two terms (rows
/// of 40), 8 factors and the prescale; or the combine's scratch where that is more.
pub(super) fn tc_smem_bytes(head_dim: usize, group: usize, stages: usize) -> usize {
    let tiles = stages * 2 * GROUP_TILE * head_dim * 2;
    let end =
        tiles + 2 * 8 * (head_dim + 8) * 2 + 2 * GROUP_TILE * 9 * 4 + 2 * 8 * 40 * 2 + 32 + 16;
    end.max(combine_scratch_bytes(group))
}

/// [`tc_smem_bytes`] with a single sequence's stages (three, two for heads over 128).
fn group_tc_smem_bytes(head_dim: usize, group: usize) -> usize {
    let stages = if head_dim > 128 { 2 } else { GROUP_STAGES };
    tc_smem_bytes(head_dim, group, stages)
}

fn flash_smem_bytes(head_dim: usize) -> usize {
    FA_STAGES * 2 * FA_BK * (head_dim + FA_PAD) * std::mem::size_of::<u16>()
}

/// What shapes each head's softmax besides its keys: the factor on `q·k`, the sliding window
/// and the sinks. Every attention kernel takes all three.
#[derive(Clone, Copy)]
pub struct AttnSoftmax<'a> {
    /// The factor on `q·k`: `AttnShape::scale` (`1 / sqrt(head size)`, or deepseek2's).
    pub scale: f32,
    /// A query at position p sees keys p - window < k <= p ([`window_arg`]); `None`: every key
    /// from 0.
    pub window: Option<usize>,
    /// gpt-oss's attention sinks: one logit per query head (`n_head` floats) that joins the
    /// softmax's maximum and denominator and has no value row.
    pub sinks: Option<&'a CudaSlice<f32>>,
}

impl AttnSoftmax<'_> {
    /// `1 / sqrt(head_dim)`, over `window`, no sinks.
    pub fn plain(head_dim: usize, window: Option<usize>) -> Self {
        Self {
            scale: 1.0 / (head_dim as f32).sqrt(),
            window,
            sinks: None,
        }
    }
}

/// Which kernel computes prefill attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillKernel {
    /// flash_attn.cu: f16 tensor cores (Q and P rounded to f16, f32 accumulation).
    Mma,
    /// attention.cu's attn_prefill: one warp per query row, f32 throughout.
    Scalar,
    /// attention.cu's attn_prefill_f16ref: ggml's CPU arithmetic for short ubatches (f16 Q and
    /// output accumulator, keys in order), which the CPU backend reproduces too.
    F16Ref,
    /// attention.cu's attn_prefill_f32ref: the CPU's f32 arithmetic in its order (the CPU's
    /// path from 64 rows, and at every size over an f32 cache), for short ubatches.
    F32Ref,
}

impl PrefillKernel {
    /// Whether this kernel reads a cache of `format`: the scalar prefill every format, the
    /// CPU-order one f16 and f32, the tensor-core and ggml-order ones f16 only.
    pub fn reads(self, format: KvFormat) -> bool {
        match self {
            PrefillKernel::Scalar => true,
            PrefillKernel::F32Ref => matches!(format, KvFormat::F16 | KvFormat::F32),
            PrefillKernel::Mma | PrefillKernel::F16Ref => format == KvFormat::F16,
        }
    }
}

/// Warps a block of attn_prefill_f32ref (the kernel's F32REF_WARPS), one per (row, head).
const F32REF_WARPS: usize = 4;

/// Per-split partial results of flash-decoding: room for `max_q` query rows of `n_head`
/// heads, `n_split` splits each.
pub struct DecodeWork {
    pub(super) m: CudaSlice<f32>,
    pub(super) l: CudaSlice<f32>,
    pub(super) acc: CudaSlice<f32>,
    /// `[max_q][n_head]` finished-split counters of the fused combine, zero between launches.
    pub(super) done: CudaSlice<i32>,
    pub max_q: usize,
    pub n_head: usize,
    pub n_split: usize,
    pub head_dim: usize,
}

impl DecodeWork {
    pub fn new(
        dev: &CudaDevice,
        max_q: usize,
        n_head: usize,
        head_dim: usize,
        n_split: usize,
    ) -> Result<Self> {
        assert!(
            (1..=ATTN_MAX_SPLITS).contains(&n_split),
            "decode: {n_split} splits"
        );
        let parts = max_q * n_head * n_split;
        Ok(Self {
            m: dev.zeros(parts)?,
            l: dev.zeros(parts)?,
            acc: dev.zeros(parts * head_dim)?,
            done: dev.zeros(max_q * n_head)?,
            max_q,
            n_head,
            n_split,
            head_dim,
        })
    }
}

pub struct Attention {
    launch: Launcher,
    /// Per [`KvFormat`].
    kv_store: Vec<CudaFunction>,
    combine: CudaFunction,
    /// Head size -> `attn_decode_combine_q8k_dD` (the combine that quantizes its output too).
    combine_q8k: HashMap<usize, CudaFunction>,
    /// Per [`KvFormat`], then per entry of ATTN_HEAD_DIMS (`None`: a size the format cannot
    /// hold).
    decode: Vec<Vec<Option<CudaFunction>>>,
    prefill: Vec<Vec<Option<CudaFunction>>>,
    /// Per entry of ATTN_HEAD_DIMS, then of ATTN_GROUPS (f16 caches only).
    decode_group: Vec<Vec<CudaFunction>>,
    /// (head size, group) of ATTN_TC_DIMS × ATTN_TC_GROUPS -> `attn_decode_group_tc_*`.
    decode_group_tc: HashMap<(usize, usize), CudaFunction>,
    /// (head size, group) of ATTN_ROPE_DIMS × ATTN_TC_GROUPS -> `attn_decode_group_tc_rope_*`.
    decode_rope: HashMap<(usize, usize), CudaFunction>,
    /// (head size of ATTN_ROPE_DIMS, bulk copies) -> `attn_decode_group_rope_row_d<D>_g1`,
    /// `attn_decode_group_rope_row_bulk_d<D>_g1`.
    decode_rope_row: HashMap<(usize, bool), CudaFunction>,
    /// Head size of ATTN_ROPE_DIMS -> `attn_decode_group_tc_rope_d<D>_g8h2`.
    decode_rope_half: HashMap<usize, CudaFunction>,
    /// Per entry of ATTN_HEAD_DIMS (f16 caches only; `None` past MMA_HEAD_DIMS).
    flash: Vec<Option<CudaFunction>>,
    prefill_f16ref: Vec<CudaFunction>,
    /// Per [`KvFormat`] (`None` but f16 and f32), then per entry of ATTN_HEAD_DIMS.
    prefill_f32ref: Vec<Option<Vec<CudaFunction>>>,
}

pub(super) fn dim_index(head_dim: usize) -> Result<usize> {
    ATTN_HEAD_DIMS
        .iter()
        .position(|&d| d == head_dim)
        .ok_or_else(|| CudaError::Invalid(format!("attention: no kernel for head_dim {head_dim}")))
}

/// The kernel of `cache`'s format and head size among `per_dim` (one format's, by
/// ATTN_HEAD_DIMS).
fn kernel_for<'a>(
    per_dim: &'a [Option<CudaFunction>],
    cache: &KvCache,
    what: &str,
) -> Result<&'a CudaFunction> {
    per_dim[dim_index(cache.head_dim)?].as_ref().ok_or_else(|| {
        CudaError::Invalid(format!(
            "attention {what}: no {} kernel for head_dim {}",
            cache.format.name(),
            cache.head_dim
        ))
    })
}

/// The kernels' `window` argument: the window's positions, or 0 for none.
pub(super) fn window_arg(window: Option<usize>) -> Result<i32> {
    match window {
        Some(0) => Err(CudaError::Invalid(
            "attention: a window of 0 positions".into(),
        )),
        Some(w) => Ok(int(w, "window")),
        None => Ok(0),
    }
}

/// The kernels' `sinks` argument (a null pointer for none), `n_head` logits at least.
pub(super) fn sinks_arg<'a>(sm: &AttnSoftmax<'a>, n_head: usize) -> Option<&'a CudaSlice<f32>> {
    if let Some(s) = sm.sinks {
        assert!(
            s.len() >= n_head,
            "attention: {} sinks for {n_head} heads",
            s.len()
        );
    }
    sm.sinks
}

/// Checks the shapes shared by decode and prefill; returns the number of query rows.
fn query_rows(q: usize, out: usize, positions: usize, n_head: usize, cache: &KvCache) -> usize {
    let width = n_head * cache.head_dim;
    assert!(
        n_head > 0 && n_head.is_multiple_of(cache.n_kv_head),
        "attention: {n_head} heads over {} KV heads",
        cache.n_kv_head
    );
    assert!(
        positions > 0 && q == positions * width,
        "attention: q is not one row per position"
    );
    assert!(out >= q, "attention: out too small");
    positions
}

impl Attention {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let f = |name: String| dev.function(&ATTENTION, &name);
        let with_smem = |name: String, bytes: usize| -> Result<CudaFunction> {
            dev.function_with_smem(&ATTENTION, &name, bytes)
        };
        // `<stem>_d<D>` of `file` for each of ATTN_HEAD_DIMS.
        let per_dim = |file: &'static KernelFile, stem: &str| -> Result<Vec<CudaFunction>> {
            ATTN_HEAD_DIMS
                .iter()
                .map(|d| dev.function(file, &format!("{stem}_d{d}")))
                .collect()
        };
        // The same for a cache format, at the sizes it holds.
        let per_format = |file: &'static KernelFile,
                          stem: &str,
                          q: KvFormat|
         -> Result<Vec<Option<CudaFunction>>> {
            ATTN_HEAD_DIMS
                .iter()
                .map(|&d| {
                    q.holds(d)
                        .then(|| dev.function(file, &format!("{stem}{}_d{d}", q.infix())))
                        .transpose()
                })
                .collect()
        };
        let flash = ATTN_HEAD_DIMS
            .iter()
            .map(|&d| {
                if !MMA_HEAD_DIMS.contains(&d) {
                    return Ok(None);
                }
                let name = format!("flash_attn_prefill_d{d}");
                let func = dev.function_with_smem(&FLASH_ATTN, &name, flash_smem_bytes(d))?;
                Ok(Some(func))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            launch: launch.clone(),
            kv_store: KvFormat::ALL
                .iter()
                .map(|q| f(format!("kv_store_{}", q.name())))
                .collect::<Result<_>>()?,
            combine: f("attn_decode_combine".into())?,
            combine_q8k: COMBINE_Q8K_DIMS
                .iter()
                .map(|&d| Ok((d, f(format!("attn_decode_combine_q8k_d{d}"))?)))
                .collect::<Result<_>>()?,
            decode: KvFormat::ALL
                .iter()
                .map(|&q| per_format(&ATTENTION, "attn_decode_split", q))
                .collect::<Result<_>>()?,
            prefill: KvFormat::ALL
                .iter()
                .map(|&q| per_format(&ATTENTION_PREFILL, "attn_prefill", q))
                .collect::<Result<_>>()?,
            decode_group: ATTN_HEAD_DIMS
                .iter()
                .map(|&d| {
                    ATTN_GROUPS
                        .iter()
                        .map(|&g| {
                            let name = format!("attn_decode_group_d{d}_g{g}");
                            with_smem(name, group_smem_bytes(d, g))
                        })
                        .collect::<Result<_>>()
                })
                .collect::<Result<_>>()?,
            decode_group_tc: ATTN_TC_DIMS
                .iter()
                .flat_map(|&d| ATTN_TC_GROUPS.iter().map(move |&g| (d, g)))
                .map(|(d, g)| {
                    let name = format!("attn_decode_group_tc_d{d}_g{g}");
                    Ok(((d, g), with_smem(name, group_tc_smem_bytes(d, g))?))
                })
                .collect::<Result<_>>()?,
            decode_rope: ATTN_ROPE_DIMS
                .iter()
                .flat_map(|&d| ATTN_TC_GROUPS.iter().map(move |&g| (d, g)))
                .map(|(d, g)| {
                    let name = format!("attn_decode_group_tc_rope_d{d}_g{g}");
                    let bytes = group_tc_smem_bytes(d, g) + rope_extra_bytes(d, g, false);
                    Ok(((d, g), with_smem(name, bytes)?))
                })
                .collect::<Result<_>>()?,
            decode_rope_half: ATTN_ROPE_DIMS
                .iter()
                .map(|&d| {
                    let name = format!("attn_decode_group_tc_rope_d{d}_g8h2");
                    let bytes = group_tc_smem_bytes(d, 4) + rope_extra_bytes(d, 4, false);
                    Ok((d, with_smem(name, bytes)?))
                })
                .collect::<Result<_>>()?,
            decode_rope_row: ATTN_ROPE_DIMS
                .iter()
                .flat_map(|&d| [(d, false), (d, true)])
                .map(|(d, bulk)| {
                    let kind = if bulk { "_bulk" } else { "" };
                    let name = format!("attn_decode_group_rope_row{kind}_d{d}_g1");
                    let bytes = group_smem_bytes(d, 1) + rope_extra_bytes(d, 1, true);
                    Ok(((d, bulk), with_smem(name, bytes)?))
                })
                .collect::<Result<_>>()?,
            flash,
            prefill_f16ref: per_dim(&ATTENTION_PREFILL, "attn_prefill_f16ref")?,
            prefill_f32ref: KvFormat::ALL
                .iter()
                .map(|&q| {
                    let stem = format!("attn_prefill_f32ref{}", q.infix());
                    PrefillKernel::F32Ref
                        .reads(q)
                        .then(|| per_dim(&ATTENTION_PREFILL, &stem))
                        .transpose()
                })
                .collect::<Result<_>>()?,
        })
    }

    /// Stores rows of `k` and `v` (`[n][n_kv_head * head_dim]` f32) in the cache's format (f16,
    /// f32 as they are, or blocks quantized as ferrolm-quant quantizes them) at positions `pos0[0]..pos0[0] + n`;
    /// the caller keeps them inside the cache.
    pub fn store(
        &self,
        cache: &mut KvCache,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        pos0: &CudaSlice<u32>,
    ) -> Result<()> {
        let width = cache.n_kv_head * cache.head_dim;
        assert_eq!(k.len(), v.len(), "kv_store: k and v differ");
        assert!(k.len().is_multiple_of(width), "kv_store: not whole rows");
        assert!(!pos0.is_empty(), "kv_store: no position");
        let n = k.len() / width;
        assert!(n <= cache.n_ctx, "kv_store: more rows than the cache holds");
        let (ni, nkv, hd) = (
            int(n, "kv rows"),
            int(cache.n_kv_head, "n_kv_head"),
            int(cache.head_dim, "head_dim"),
        );
        let (kc, vc, pages) = (cache.k_addr(), cache.v_addr(), cache.pages());
        let mut b = self.launch.builder(&self.kv_store[cache.format.index()]);
        b.arg(k)
            .arg(v)
            .arg(&kc)
            .arg(&vc)
            .arg(pos0)
            .arg(&ni)
            .arg(&nkv)
            .arg(&hd)
            .arg(&pages);
        let cfg = LaunchConfig {
            grid_dim: (super::stride_blocks(k.len(), 256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: kv_store_{f16,q8_0,q4_0,f32}(k, v, kc, vc, pos0, n, n_kv_head, head_dim,
        // pages): n rows of width floats in, a pool and table of this head shape in their
        // format (KvPool::new: head_dim a multiple of 32 for blocks; one thread per element,
        // whole warps since width is then too); blocks for positions pos0..pos0 + n in the
        // table (BlockTable::prepare_write) are the caller's.
        unsafe { b.launch(cfg) }.during("launching kv_store")?;
        Ok(())
    }

    /// Decode: `out[t][h] = softmax(q[t][h] · K[first..=pos[t]][g]ᵀ · scale) · V[..][g]` for a
    /// few query rows (at most `work.max_q`), `first` the window's first key (0 without one),
    /// split over `n_split` blocks per head (at most `work.n_split`: a windowed layer may take
    /// fewer, its window being shorter than the context the work was sized for). With
    /// `fused_combine` the split kernel's last block per head combines the splits (one launch),
    /// else a second kernel does; the same arithmetic either way. `kernel`: a block per query
    /// head, or a block per KV head reading its keys and values once for all the query heads
    /// that share them ([`DecodeKernel`]).
    ///
    /// `q8`: where the combine has its own launch and a kernel for the head size, it writes
    /// `out` quantized as Q8_K there too (rows of `n_head * head_dim / 32` activation blocks,
    /// quantize.cu's layout; the codes `quantize_q8_k` would give) and the answer is `true`;
    /// else `q8` is untouched and the answer `false`.
    ///
    /// `rot` (one query row, [`DecodeKernel::GroupTensorCores`], a shape it
    /// [takes](DecodeRotation::takes)): q and `rot.k` are the products' rows before their
    /// norms and rotation, and the walk norms and rotates them itself and stores the row's key
    /// and value in the cache (`FERROLM_ATTN_ROPE`; the same bits as
    /// `NormRope::qk_norm_rope`, [`Self::store`] and this walk).
    #[allow(clippy::too_many_arguments)]
    pub fn decode(
        &self,
        fused_combine: bool,
        kernel: DecodeKernel,
        q: &CudaSlice<f32>,
        rot: Option<&DecodeRotation<'_>>,
        cache: &KvCache,
        positions: &CudaSlice<u32>,
        n_head: usize,
        sm: AttnSoftmax<'_>,
        n_split: usize,
        work: &mut DecodeWork,
        out: &mut CudaSlice<f32>,
        q8: Option<&mut CudaSlice<u8>>,
    ) -> Result<bool> {
        let n_q = query_rows(q.len(), out.len(), positions.len(), n_head, cache);
        assert!(
            n_q <= work.max_q && n_head == work.n_head && cache.head_dim == work.head_dim,
            "decode: work buffers of another shape"
        );
        assert!(
            (1..=work.n_split).contains(&n_split),
            "decode: {n_split} splits, work for {}",
            work.n_split
        );
        let sinks = sinks_arg(&sm, n_head);
        let fused = fused_combine;
        let group = n_head / cache.n_kv_head;
        if let Some(rot) = rot {
            let (win, scale) = (window_arg(sm.window)?, sm.scale);
            let (kc, vc, pages) = (cache.k_addr(), cache.v_addr(), cache.pages());
            let shape_ok =
                n_q == 1 && q.len() == n_head * cache.head_dim && rot.takes(cache, group, kernel);
            if !shape_ok {
                return Err(CudaError::Invalid(format!(
                    "decode with its own rotation ({kernel:?}): {n_q} rows, {group} query heads \
                     a KV head, head size {}, {} cache",
                    cache.head_dim,
                    cache.format.name()
                )));
            }
            let hd = cache.head_dim;
            // Blocks a KV head: two where the head split takes a group of 8.
            let halves = if kernel == DecodeKernel::GroupTensorCores && rot.head_split && group == 8
            {
                2
            } else {
                1
            };
            let (f, smem, name) = if halves == 2 {
                let smem = group_tc_smem_bytes(hd, 4) + rope_extra_bytes(hd, 4, false);
                (
                    &self.decode_rope_half[&hd],
                    smem,
                    "attn_decode_group_tc_rope_g8h2",
                )
            } else if kernel == DecodeKernel::GroupTensorCores {
                let smem = group_tc_smem_bytes(hd, group) + rope_extra_bytes(hd, group, false);
                let f = &self.decode_rope[&(hd, group)];
                (f, smem, "attn_decode_group_tc_rope")
            } else {
                let smem = group_smem_bytes(hd, group) + rope_extra_bytes(hd, group, true);
                (
                    &self.decode_rope_row[&(hd, rot.bulk)],
                    smem,
                    "attn_decode_group_rope_row",
                )
            };
            check_rope(rot.rope, 1, cache.head_dim);
            let theta = theta_scale(rot.rope.base, cache.head_dim);
            let null = 0u64;
            let mut b = self.launch.builder(f);
            b.arg(q).arg(rot.k).arg(rot.v).arg(rot.wq).arg(rot.wk);
            b.arg(&rot.eps).arg(&kc).arg(&vc).arg(positions);
            b.arg(&mut work.m).arg(&mut work.l).arg(&mut work.acc);
            if fused {
                b.arg(&mut work.done).arg(&mut *out);
            } else {
                b.arg(&null).arg(&null);
            }
            b.arg(&pages).arg(&scale).arg(&win).arg(sinks);
            rot.rope.push(&mut b, &theta, &null);
            let cfg = LaunchConfig {
                grid_dim: (n_split as u32, (halves * cache.n_kv_head) as u32, 1),
                block_dim: ((NWARPS * 32) as u32, 1, 1),
                shared_mem_bytes: smem as u32,
            };
            // SAFETY: attn_decode_group_tc_rope_dD_gG (or _g8h2, two blocks a KV head) /
            // attn_decode_group_rope_row_dD_g1(q, k,
            // v, wq, wk, eps, kc, vc, pos, m, l, acc, done, out, pages, scale, window, sinks,
            // theta_scale, ff|null, rs, table|null): one row (checked) of n_head * D queries
            // and n_kv_head * D keys and values, norm weights of a head or of a row as the
            // kernel takes them (`takes`), an f16 cache of this head shape whose table holds
            // the row's position (the caller's, as for `store`), partials as below; the
            // dynamic shared memory its load raised the limit to.
            unsafe { b.launch(cfg) }.during(format!("launching {name}"))?;
        } else {
            self.walk(
                fused, kernel, q, cache, positions, n_head, sm, n_split, work, out,
            )?;
        }
        if fused {
            return Ok(false);
        }
        self.combine_splits(q8, n_q, n_head, n_split, cache.head_dim, sinks, work, out)
    }

    /// [`Self::decode`]'s walk over the cache, q as it is.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        fused: bool,
        kernel: DecodeKernel,
        q: &CudaSlice<f32>,
        cache: &KvCache,
        positions: &CudaSlice<u32>,
        n_head: usize,
        sm: AttnSoftmax<'_>,
        n_split: usize,
        work: &mut DecodeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = kernel_for(&self.decode[cache.format.index()], cache, "decode")?;
        let n_q = query_rows(q.len(), out.len(), positions.len(), n_head, cache);
        let win = window_arg(sm.window)?;
        let scale = sm.scale;
        let sinks = sinks_arg(&sm, n_head);
        let (nh, nkv) = (int(n_head, "n_head"), int(cache.n_kv_head, "n_kv_head"));
        let (kc, vc, pages) = (cache.k_addr(), cache.v_addr(), cache.pages());
        let group = n_head / cache.n_kv_head;
        let no_group = || {
            CudaError::Invalid(format!(
                "decode by KV group ({kernel:?}): no kernel for {group} query heads a KV head, \
                 head size {}, {} cache",
                cache.head_dim,
                cache.format.name()
            ))
        };
        if kernel != DecodeKernel::Split && cache.format != KvFormat::F16 {
            return Err(no_group());
        }
        // A block per (split, query head) or, grouped, per (split, KV head).
        let (f, blocks_y, name, smem) = match kernel {
            DecodeKernel::Split => (f, n_head, "attn_decode_split", 0),
            DecodeKernel::Group => {
                let gi = ATTN_GROUPS.iter().position(|&g| g == group);
                let f = &self.decode_group[dim_index(cache.head_dim)?][gi.ok_or_else(no_group)?];
                let smem = group_smem_bytes(cache.head_dim, group);
                (f, cache.n_kv_head, "attn_decode_group", smem)
            }
            DecodeKernel::GroupTensorCores => {
                let f = self
                    .decode_group_tc
                    .get(&(cache.head_dim, group))
                    .ok_or_else(no_group)?;
                let smem = group_tc_smem_bytes(cache.head_dim, group);
                (f, cache.n_kv_head, "attn_decode_group_tc", smem)
            }
        };
        let grouped = kernel != DecodeKernel::Split;
        let null = 0u64; // a null pointer: no fused combine
        let mut b = self.launch.builder(f);
        b.arg(q)
            .arg(&kc)
            .arg(&vc)
            .arg(positions)
            .arg(&mut work.m)
            .arg(&mut work.l)
            .arg(&mut work.acc);
        if fused {
            b.arg(&mut work.done).arg(&mut *out);
        } else {
            b.arg(&null).arg(&null);
        }
        b.arg(&nh);
        if !grouped {
            b.arg(&nkv); // the grouped kernel's KV head is its block
        }
        b.arg(&pages).arg(&scale).arg(&win).arg(sinks);
        let cfg = LaunchConfig {
            grid_dim: (n_split as u32, blocks_y as u32, n_q as u32),
            block_dim: ((NWARPS * 32) as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // SAFETY: attn_decode_split_dD(q, kc, vc, pos, m, l, acc, done, out, n_head, n_kv_head,
        // pages, scale, window, sinks), or attn_decode_group[_tc]_dD_gG(.. out, n_head, pages,
        // scale, window, sinks) (sinks null or n_head floats: sinks_arg; the dynamic shared
        // memory its load raised the limit to) with G = n_head / n_kv_head
        // over an f16 cache (rows of D elements, 16-byte aligned): n_q rows of q, positions
        // whose blocks the table holds (the caller's), partials and counters
        // sized by work (max_q >= n_q rows, n_split <= its splits: the partials are laid out by
        // the grid's split count), out n_q * n_head * head_dim floats, or done and out null when
        // the combine kernel follows.
        unsafe { b.launch(cfg) }.during(format!("launching {name}"))?;
        Ok(())
    }

    /// [`Self::decode`]'s combine of the walk's splits in a launch of its own (quantizing
    /// the output too where `q8` and a kernel allow: the answer).
    #[allow(clippy::too_many_arguments)]
    fn combine_splits(
        &self,
        q8: Option<&mut CudaSlice<u8>>,
        n_q: usize,
        n_head: usize,
        n_split: usize,
        head_dim: usize,
        sinks: Option<&CudaSlice<f32>>,
        work: &DecodeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<bool> {
        let nh = int(n_head, "n_head");
        let (ns, hd) = (int(n_split, "n_split"), int(head_dim, "head_dim"));
        let width = n_head * head_dim;
        let q8k = self
            .combine_q8k
            .get(&head_dim)
            .filter(|_| width.is_multiple_of(QK_K));
        if let (Some(f), Some(q8)) = (q8k, q8) {
            assert!(
                q8.len() >= Quantize::q8_1_bytes(n_q, width),
                "decode: {} bytes for {n_q} rows of Q8_K",
                q8.len()
            );
            let mut b = self.launch.builder(f);
            b.arg(&work.m)
                .arg(&work.l)
                .arg(&work.acc)
                .arg(out)
                .arg(q8)
                .arg(&nh)
                .arg(&ns)
                .arg(sinks);
            let cfg = LaunchConfig {
                grid_dim: ((width / QK_K) as u32, n_q as u32, 1),
                block_dim: ((QK_K / head_dim * NWARPS * 32) as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: attn_decode_combine_q8k_dD(m, l, acc, out, outq, n_head, n_split, sinks)
            // over the partials written just above, D the cache's head size; out holds n_q *
            // n_head * D floats, outq n_q rows of n_head * D / 32 block_q8_1s (asserted).
            unsafe { b.launch(cfg) }.during("launching attn_decode_combine_q8k")?;
            return Ok(true);
        }
        let mut b = self.launch.builder(&self.combine);
        b.arg(&work.m)
            .arg(&work.l)
            .arg(&work.acc)
            .arg(out)
            .arg(&nh)
            .arg(&ns)
            .arg(&hd)
            .arg(sinks);
        // The split kernels' block size: the combine sums the splits in sets that follow
        // the block size, so the fused combine and this one give the same bits.
        let cfg = LaunchConfig {
            grid_dim: (n_head as u32, n_q as u32, 1),
            block_dim: ((NWARPS * 32) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: attn_decode_combine(m, l, acc, out, n_head, n_split, head_dim, sinks) over
        // the partials written just above; out holds n_q * n_head * head_dim floats.
        unsafe { b.launch(cfg) }.during("launching attn_decode_combine")?;
        Ok(false)
    }

    /// Prefill: the same as [`decode`](Self::decode) (`sm` too) for a ubatch of any number
    /// of query rows, on `kernel` (the plan's `prefill_kernel`; parity checks run each). Scalar:
    /// one warp per (row, head), K/V tiles staged in shared memory as f32. Mma: FA_BQ (row,
    /// head) pairs of one KV group per block, f16 tensor cores, K/V tiles copied asynchronously.
    #[allow(clippy::too_many_arguments)]
    pub fn prefill(
        &self,
        kernel: PrefillKernel,
        q: &CudaSlice<f32>,
        cache: &KvCache,
        positions: &CudaSlice<u32>,
        n_head: usize,
        sm: AttnSoftmax<'_>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let di = dim_index(cache.head_dim)?;
        let win = window_arg(sm.window)?;
        if !kernel.reads(cache.format) {
            return Err(CudaError::Invalid(format!(
                "attention: the {kernel:?} prefill does not read {} caches",
                cache.format.name()
            )));
        }
        let n_q = query_rows(q.len(), out.len(), positions.len(), n_head, cache);
        let scale = sm.scale;
        let sinks = sinks_arg(&sm, n_head);
        let (nq, nh, nkv) = (
            int(n_q, "query rows"),
            int(n_head, "n_head"),
            int(cache.n_kv_head, "n_kv_head"),
        );
        let (kc, vc, pages) = (cache.k_addr(), cache.v_addr(), cache.pages());
        let (f, cfg) = match kernel {
            PrefillKernel::Scalar => (
                kernel_for(&self.prefill[cache.format.index()], cache, "prefill")?,
                LaunchConfig {
                    grid_dim: (n_q.div_ceil(NWARPS) as u32, n_head as u32, 1),
                    block_dim: ((NWARPS * 32) as u32, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            PrefillKernel::F32Ref => (
                &self.prefill_f32ref[cache.format.index()]
                    .as_ref()
                    .expect("PrefillKernel::reads")[di],
                LaunchConfig {
                    grid_dim: (
                        int((n_q * n_head).div_ceil(F32REF_WARPS), "f32ref blocks") as u32,
                        1,
                        1,
                    ),
                    block_dim: ((F32REF_WARPS * 32) as u32, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            PrefillKernel::F16Ref => (
                &self.prefill_f16ref[di],
                LaunchConfig {
                    grid_dim: (n_q as u32, n_head as u32, 1),
                    // Whole warps: its sums shuffle across every lane.
                    block_dim: (cache.head_dim.next_multiple_of(32) as u32, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            PrefillKernel::Mma => {
                let rows = n_q * (n_head / cache.n_kv_head);
                let blocks = int(rows.div_ceil(FA_BQ), "flash blocks") as u32;
                let Some(f) = &self.flash[di] else {
                    return Err(CudaError::Invalid(format!(
                        "attention: the tensor-core prefill takes head sizes {MMA_HEAD_DIMS:?}, \
                         not {} (the plan runs the scalar one)",
                        cache.head_dim
                    )));
                };
                (
                    f,
                    LaunchConfig {
                        grid_dim: (blocks, cache.n_kv_head as u32, 1),
                        block_dim: ((FA_NWARPS * 32) as u32, 1, 1),
                        shared_mem_bytes: flash_smem_bytes(cache.head_dim) as u32,
                    },
                )
            }
        };
        let mut b = self.launch.builder(f);
        b.arg(q)
            .arg(&kc)
            .arg(&vc)
            .arg(positions)
            .arg(out)
            .arg(&nq)
            .arg(&nh)
            .arg(&nkv)
            .arg(&pages)
            .arg(&scale)
            .arg(&win)
            .arg(sinks);
        // SAFETY: attn_prefill[_f16ref|_f32ref|_f32ref_f32|_q8_0|_q4_0|_f32]_dD and
        // flash_attn_prefill_dD take
        // (q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale, window, sinks): n_q rows
        // in and out, positions whose blocks the table holds (the caller's), sinks null or
        // n_head floats; the
        // flash kernel's dynamic shared memory is the size it was raised to.
        unsafe { b.launch(cfg) }.during("launching attention prefill")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
