//! `kernels/moe_route.cu`: router logits, softmax and top-k for any number of tokens, leaving
//! the choices in device memory (`ids`, `weights`) for the expert kernels. Also the shapes of
//! one layer's experts, [`MoeExperts`], shared by decode (`moe_decode`) and prefill.
//!
//! Contract against the CPU's `moe::route`: the logits are the CPU's f32 dots bit for bit (in
//! the order of its AVX-512 dot, `dot_f32_avx512_order`), so the ids are the CPU's slot for
//! slot where the CPU runs that dot, and otherwise differ only where its k-th and (k+1)-th
//! probabilities are within f32 noise of each other; weights within f32 rounding (`expf`
//! against Rust's `exp`). Logits of more than a few tokens take the f32 GEMM; those of a few
//! `moe_logits_small`, with the top-k in the same launch (`moe_route_small`, the same bits)
//! among the decode fusions ([`RouterLogits`]).

use super::launch::Launcher;
use super::norm_rope::norm_threads;
use super::{int, ActQuant, GemmF32, QuantMatrix, Q8_1_BLOCK_BYTES};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MOE_ROUTE;
use crate::plan::RouterLogits;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};

/// Most experts a router may have (the kernel's 32 × TOPK_PER_LANE).
pub const MOE_MAX_EXPERTS: usize = 256;
/// Most experts a token may use (one lane of a warp a slot).
pub const MOE_MAX_USED: usize = 32;
/// Most tokens the logits' mat-vec kernel takes (the kernel's ROUTE_SMALL_N).
pub const ROUTER_SMALL_N: usize = 8;
const TOPK_WARPS: u32 = 4;
/// Threads a block of the mat-vec kernels (ROUTE_THREADS).
const ROUTE_THREADS: u32 = 256;
/// Widest router row the mat-vec kernels take (SMALL_MAX_EMBD): the fused norm's launch
/// stages it, with ROUTER_SMALL_N tokens' rows, in shared memory.
pub const ROUTER_SMALL_MAX_EMBD: usize = 4096;
/// The most dynamic shared memory a block of the cluster launch
/// (`add_rms_norm_route_cluster`) takes: its share of the router's rows and the tokens' rows
/// (allowed at load on sm_90; the block's own 8 KB of logits beside it).
pub(crate) const ROUTE_CLUSTER_STAGE_BYTES: usize = 192 * 1024;
/// The `gating` argument's bit for one token's top-k by the last block's threads together
/// (moe_route.cu's ROUTE_TOPK_BLOCK).
const ROUTE_TOPK_BLOCK: i32 = 4;
/// The bit that keeps one token's sums for the residual's write-back (moe_route.cu's
/// ROUTE_KEEP_SUMS).
const ROUTE_KEEP_SUMS: i32 = 8;
/// The bit that spreads the norm's outputs over the blocks (moe_route.cu's ROUTE_SPREAD_OUT).
const ROUTE_SPREAD_OUT: i32 = 16;

/// How [`MoeRoute::add_norm_route`] runs (the plan's choices; each gives the same bits): one
/// cluster of that many blocks or a block an expert; one token's top-k by the last block's
/// threads together; one token's residual written back from the sums the blocks kept in
/// shared memory; the norm's outputs written a share a block after each block's count.
#[derive(Clone, Copy, Debug, Default)]
pub struct NormRouteHow {
    pub cluster: Option<u32>,
    pub topk_block: bool,
    pub keep_sums: bool,
    pub spread_out: bool,
}

/// That launch's shared memory for `n` tokens of `n_embd`: the expert's row and the tokens'.
fn small_stage_bytes(n: usize, n_embd: usize) -> usize {
    (1 + n) * n_embd * 4
}

/// One layer's router: `ffn_gate_inp`, f32 `[n_expert][n_embd]`, and how its top-k is used.
pub struct MoeRouter {
    pub w: CudaSlice<f32>,
    pub n_expert: usize,
    pub n_embd: usize,
    /// Experts a token uses (k).
    pub n_used: usize,
    /// Renormalise the k picked probabilities to sum to 1 (qwen3moe) or keep them (olmoe).
    pub renorm: bool,
    /// gpt-oss's gating instead: the top-k of the logits, then a softmax over the k picked
    /// ([`Self::topk_softmax`]).
    pub topk_softmax: bool,
}

impl MoeRouter {
    pub fn upload(
        dev: &CudaDevice,
        w: &[f32],
        n_expert: usize,
        n_embd: usize,
        n_used: usize,
        renorm: bool,
    ) -> Result<Self> {
        check_router(w.len(), n_expert, n_embd, n_used)?;
        Ok(Self {
            w: dev.upload(w)?,
            n_expert,
            n_embd,
            n_used,
            renorm,
            topk_softmax: false,
        })
    }

    /// The same router gating as gpt-oss: top-k of the logits, softmax over the k picked.
    pub fn topk_softmax(self) -> Self {
        Self {
            renorm: false,
            topk_softmax: true,
            ..self
        }
    }

    /// The kernels' `gating` argument (moe_route.cu).
    fn gating_arg(&self) -> i32 {
        if self.topk_softmax {
            2
        } else {
            i32::from(self.renorm)
        }
    }
}

/// The stacked expert weights of one layer: expert `e` owns rows `e*n_ff..(e+1)*n_ff` of
/// `gate` and `up` (`[n_expert*n_ff][n_embd]`) and rows `e*n_embd..(e+1)*n_embd` of `down`
/// (`[n_expert*n_embd][n_ff]`).
#[derive(Clone, Copy)]
pub struct MoeExperts<'a> {
    pub gate: &'a QuantMatrix,
    pub up: &'a QuantMatrix,
    pub down: &'a QuantMatrix,
    pub n_expert: usize,
    /// Experts a token uses (k).
    pub n_used: usize,
    pub n_ff: usize,
    /// gpt-oss's biases and activation; the default (none, SwiGLU) for the other models.
    pub epilogue: ExpertEpilogue<'a>,
}

/// What the expert kernels add after their products (`kernels/common.cuh`'s
/// `ExpertEpilogue`): gpt-oss's per-expert biases, added to the gate and up products before
/// the activation and to the down product before its routing weight, as the CPU does; and its
/// `swiglu_oai` in place of SwiGLU.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExpertEpilogue<'a> {
    /// Gate, up and down biases, f32 `[n_expert][n_ff]`, `[n_expert][n_ff]` and
    /// `[n_expert][n_embd]`.
    pub biases: Option<[&'a CudaSlice<u8>; 3]>,
    /// `swiglu_oai`'s (alpha, limit); `None`: SwiGLU.
    pub swiglu_oai: Option<(f32, f32)>,
}

impl<'a> ExpertEpilogue<'a> {
    /// One of the three biases (0 gate, 1 up, 2 down), or none: the kernels take a null.
    pub fn bias(&self, which: usize) -> Option<&'a CudaSlice<u8>> {
        self.biases.map(|b| b[which])
    }

    /// The kernels' (alpha, limit): limit 0 selects SwiGLU.
    pub fn act_args(&self) -> (f32, f32) {
        self.swiglu_oai.unwrap_or((0.0, 0.0))
    }
}

impl MoeExperts<'_> {
    pub fn n_embd(&self) -> usize {
        self.gate.cols
    }

    /// Panics unless the three matrices have the stacked shapes above (a caller's bug).
    pub fn check(&self) {
        let (e, ff, d) = (self.n_expert, self.n_ff, self.n_embd());
        for (name, m, rows, cols) in [
            ("gate", self.gate, e * ff, d),
            ("up", self.up, e * ff, d),
            ("down", self.down, e * d, ff),
        ] {
            assert!(
                m.rows == rows && m.cols == cols,
                "moe {name}: {}x{} is not {rows}x{cols} ({e} experts, n_ff {ff}, n_embd {d})",
                m.rows,
                m.cols
            );
        }
        assert!(
            (1..=e).contains(&self.n_used),
            "moe: {} of {e} experts",
            self.n_used
        );
        if let Some(b) = self.epilogue.biases {
            for (name, bias, rows) in [("gate", b[0], ff), ("up", b[1], ff), ("down", b[2], d)] {
                assert!(
                    bias.len() >= e * rows * 4,
                    "moe {name} bias: {} bytes for {e} experts of {rows}",
                    bias.len()
                );
            }
        }
        if let Some((_, limit)) = self.epilogue.swiglu_oai {
            assert!(
                limit > 0.0,
                "moe: swiglu_oai's limit {limit} is not positive"
            );
        }
    }
}

/// The logits of up to `max_n` tokens, allocated once (no allocation per call, so a graph can
/// capture routing).
pub struct MoeRouteWork {
    logits: CudaSlice<f32>,
    /// `moe_route_small`'s count of finished blocks: zero between launches.
    done: CudaSlice<u32>,
    pub max_n: usize,
    pub n_expert: usize,
}

impl MoeRouteWork {
    pub fn new(dev: &CudaDevice, max_n: usize, n_expert: usize) -> Result<Self> {
        Ok(Self {
            logits: dev.zeros(max_n * n_expert)?,
            done: dev.zeros(1)?,
            max_n,
            n_expert,
        })
    }

    /// The last routing's logits, `[n][n_expert]` (without the router's bias).
    pub fn logits(&self) -> &CudaSlice<f32> {
        &self.logits
    }
}

pub struct MoeRoute {
    launch: Launcher,
    logits_small: CudaFunction,
    /// `logits_small` and `topk` in one launch.
    route_small: CudaFunction,
    /// The norm before the router, `route_small` and the residual add in one launch.
    norm_route_small: CudaFunction,
    /// The same on one thread-block cluster (sm_90; `None` before).
    norm_route_cluster: Option<CudaFunction>,
    /// Logits for more than ROUTER_SMALL_N tokens or wider rows: the f32 GEMM.
    gemm: GemmF32,
    topk: CudaFunction,
    localize: CudaFunction,
}

impl MoeRoute {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        dev.context()
            .bind_to_thread()
            .during("binding the context")?;
        let f = |name| dev.function(&MOE_ROUTE, name);
        // Only the norm's launch stages rows in shared memory; the mat-vecs read them in place.
        let norm_route_small = dev.function_with_smem(
            &MOE_ROUTE,
            "add_rms_norm_route_small",
            small_stage_bytes(ROUTER_SMALL_N, ROUTER_SMALL_MAX_EMBD),
        )?;
        let norm_route_cluster = if dev.compute_capability().0 >= 9 {
            let name = "add_rms_norm_route_cluster";
            Some(dev.function_with_smem(&MOE_ROUTE, name, ROUTE_CLUSTER_STAGE_BYTES)?)
        } else {
            None
        };
        Ok(Self {
            launch: launch.clone(),
            logits_small: f("moe_logits_small")?,
            route_small: f("moe_route_small")?,
            norm_route_small,
            norm_route_cluster,
            gemm: GemmF32::load(dev, launch)?,
            topk: dev.function(&MOE_ROUTE, "moe_topk")?,
            localize: dev.function(&MOE_ROUTE, "moe_localize")?,
        })
    }

    /// Routes the `n` f32 rows of `x` (`router.n_embd` each): `ids[t*k + j]` is token `t`'s
    /// `j`-th most probable expert, `weights[t*k + j]` its weight (k = `router.n_used`); the
    /// logits on the kernel `logits` names (the plan's `router_logits`).
    #[allow(clippy::too_many_arguments)]
    pub fn route(
        &self,
        logits: RouterLogits,
        x: &CudaSlice<f32>,
        n: usize,
        router: &MoeRouter,
        work: &mut MoeRouteWork,
        ids: &mut CudaSlice<i32>,
        weights: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.route_biased(logits, x, n, router, None, work, ids, weights)
    }

    /// `norm`'s add and norm (as `NormRope::add_rms_norm_q8_1`, the same bits) and then
    /// [`Self::route_biased`] of its `n` output rows on the mat-vec with the top-k
    /// ([`RouterLogits::MatVecTopk`]), in one launch: each router block takes the norm of the
    /// rows itself (the plan's `norm_route`). With `cluster` (the plan's `norm_route_cluster`),
    /// the launch is one cluster of that many blocks, each a share of the experts (the same
    /// bits); `how`'s other choices as [`NormRouteHow`] says. With `progress`, the launch
    /// adds one to its first word once the kernel ahead is done (what times `ops::l2_ahead`).
    #[allow(clippy::too_many_arguments)]
    pub fn add_norm_route(
        &self,
        norm: NormInto<'_>,
        how: NormRouteHow,
        n: usize,
        router: &MoeRouter,
        bias: Option<&CudaSlice<f32>>,
        work: &mut MoeRouteWork,
        ids: &mut CudaSlice<i32>,
        weights: &mut CudaSlice<f32>,
        progress: Option<&CudaSlice<u32>>,
    ) -> Result<()> {
        let (ne, d, k) = (router.n_expert, router.n_embd, router.n_used);
        check_route_args(n, router, bias, work, norm.out, ids, weights);
        let group = if norm.mode == ActQuant::Q8K { 256 } else { 32 };
        assert!(
            n <= ROUTER_SMALL_N && d.is_multiple_of(group) && d <= ROUTER_SMALL_MAX_EMBD,
            "norm route: {n} tokens of {d}"
        );
        assert!(
            norm.w.len() == d
                && norm.x.len() >= n * d
                && norm.add.len() >= n * d
                && norm.outq.len() >= n * d / 32 * Q8_1_BLOCK_BYTES,
            "norm route: the norm's buffers are not {n} rows of {d}"
        );
        if n == 0 {
            return Ok(());
        }
        let (ni, di, nei, ki) = (
            int(n, "moe tokens"),
            int(d, "moe n_embd"),
            int(ne, "moe experts"),
            int(k, "moe k"),
        );
        let (gating, q8k) = (router.gating_arg(), i32::from(norm.mode == ActQuant::Q8K));
        let bit = |on: bool, b: i32| if on { b } else { 0 };
        let gating = gating
            | bit(how.topk_block, ROUTE_TOPK_BLOCK)
            | bit(how.keep_sums, ROUTE_KEEP_SUMS)
            | bit(how.spread_out, ROUTE_SPREAD_OUT);
        let cluster = how.cluster;
        // One cluster of blocks, each a share of the experts, or a block an expert; the two
        // kernels take the same parameters.
        let (func, cfg, cluster) = match (cluster, &self.norm_route_cluster) {
            (Some(blocks), Some(func)) => {
                let stage = (ne.div_ceil(blocks as usize) + n) * d * 4;
                assert!(
                    blocks as usize <= ne && stage <= ROUTE_CLUSTER_STAGE_BYTES,
                    "norm route cluster: {blocks} blocks for {ne} experts of {d}"
                );
                let cfg = LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (norm_threads(d), 1, 1),
                    shared_mem_bytes: stage as u32,
                };
                (func, cfg, Some(blocks))
            }
            _ => {
                let cfg = LaunchConfig {
                    grid_dim: (ne as u32, 1, 1),
                    block_dim: (norm_threads(d), 1, 1),
                    shared_mem_bytes: small_stage_bytes(n, d) as u32,
                };
                (&self.norm_route_small, cfg, None)
            }
        };
        let mut b = self.launch.builder(func);
        if let Some(blocks) = cluster {
            b.cluster(blocks);
        }
        b.arg(norm.x)
            .arg(norm.add)
            .arg(norm.w)
            .arg(norm.out)
            .arg(norm.outq);
        b.arg(&norm.eps).arg(&q8k);
        b.arg(&router.w).arg(&mut work.logits);
        b.arg(ids).arg(weights).arg(&mut work.done);
        b.arg(&ni)
            .arg(&di)
            .arg(&nei)
            .arg(&ki)
            .arg(&gating)
            .arg(bias)
            .arg(progress);
        // SAFETY: add_rms_norm_route_{small,cluster}(x, add, norm_w, out, outq, eps, q8k, w,
        // logits, ids, weights, done, n, n_embd, n_expert, k, gating, bias, progress): n rows of n_embd
        // floats in x, add and out and their activation blocks in outq, the router's n_expert
        // rows, n x n_expert logits (work holds max_n >= n rows), n x k ids and weights (all
        // checked above); the norm's block of at most 1024 threads; a block an expert with
        // (1 + n) rows of shared memory and the counter zero between launches, as
        // moe_route_small's, or one cluster with a block's share of the router's rows and the
        // n tokens' rows in its shared memory (within what load allowed for either).
        unsafe { b.launch(cfg) }.during("launching the norm and moe routing")?;
        Ok(())
    }

    /// [`Self::route`] with the router's bias (gpt-oss; `n_expert` floats) added to every
    /// token's logits before the top-k.
    #[allow(clippy::too_many_arguments)]
    pub fn route_biased(
        &self,
        logits: RouterLogits,
        x: &CudaSlice<f32>,
        n: usize,
        router: &MoeRouter,
        bias: Option<&CudaSlice<f32>>,
        work: &mut MoeRouteWork,
        ids: &mut CudaSlice<i32>,
        weights: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (ne, d, k) = (router.n_expert, router.n_embd, router.n_used);
        check_route_args(n, router, bias, work, x, ids, weights);
        if n == 0 {
            return Ok(());
        }
        let (ni, di, nei, ki) = (
            int(n, "moe tokens"),
            int(d, "moe n_embd"),
            int(ne, "moe experts"),
            int(k, "moe k"),
        );
        // The mat-vec for a few tokens (a warp a token), the f32 GEMM for anything else: the
        // same bits.
        let gating = router.gating_arg();
        match logits {
            RouterLogits::MatVec | RouterLogits::MatVecTopk => {
                assert!(
                    n <= ROUTER_SMALL_N && d.is_multiple_of(4) && d <= ROUTER_SMALL_MAX_EMBD,
                    "moe route: {n} tokens of {d} on the mat-vec"
                );
                let cfg = LaunchConfig {
                    grid_dim: (ne as u32, 1, 1),
                    block_dim: (ROUTE_THREADS, 1, 1),
                    shared_mem_bytes: 0, // rows read in place (moe_route.cu's logits_small)
                };
                if logits == RouterLogits::MatVecTopk {
                    let mut b = self.launch.builder(&self.route_small);
                    b.arg(x).arg(&router.w).arg(&mut work.logits);
                    b.arg(ids).arg(weights).arg(&mut work.done);
                    b.arg(&ni)
                        .arg(&di)
                        .arg(&nei)
                        .arg(&ki)
                        .arg(&gating)
                        .arg(bias);
                    // SAFETY: moe_route_small(x, w, logits, ids, weights, done, n, n_embd,
                    // n_expert, k, gating, bias): as moe_logits_small then moe_topk below, and
                    // one u32 counter that is zero between launches (made zero, reset by each
                    // launch's last block).
                    unsafe { b.launch(cfg) }.during("launching moe routing")?;
                    return Ok(());
                }
                let mut b = self.launch.builder(&self.logits_small);
                b.arg(x)
                    .arg(&router.w)
                    .arg(&mut work.logits)
                    .arg(&ni)
                    .arg(&di)
                    .arg(&nei);
                // SAFETY: moe_logits_small(x, w, logits, n, n_embd, n_expert): n x n_embd and
                // n_expert x n_embd floats in, n x n_expert out (work holds max_n >= n rows).
                unsafe { b.launch(cfg) }.during("launching moe router logits")?;
            }
            RouterLogits::Gemm { token_warps } => {
                self.gemm
                    .matmul_raw(&router.w, ne, d, x, n, &mut work.logits, token_warps)?
            }
        }
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(TOPK_WARPS as usize) as u32, 1, 1),
            block_dim: (32, TOPK_WARPS, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.launch.builder(&self.topk);
        b.arg(&work.logits)
            .arg(ids)
            .arg(weights)
            .arg(&ni)
            .arg(&nei)
            .arg(&ki)
            .arg(&gating)
            .arg(bias);
        // SAFETY: moe_topk(logits, ids, weights, n, n_expert, k, gating, bias): n x n_expert
        // floats in, n x k ids and weights out, bias null or n_expert floats (checked above);
        // k <= 32 and n_expert <= 256 (checked at upload).
        unsafe { b.launch(cfg) }.during("launching moe top-k")?;
        Ok(())
    }
}

impl MoeRoute {
    /// A tensor split's share of the experts, `experts`: `dst[i]` is `src[i]`'s index among
    /// them, or -1 (a slot the expert kernels skip) for an expert another rank holds.
    pub fn localize(
        &self,
        src: &CudaSlice<i32>,
        dst: &mut CudaSlice<i32>,
        n: usize,
        experts: std::ops::Range<usize>,
    ) -> Result<()> {
        assert!(src.len() >= n && dst.len() >= n, "moe localize: {n} ids");
        if n == 0 {
            return Ok(());
        }
        let (ni, first, count) = (
            int(n, "moe ids"),
            int(experts.start, "moe first expert"),
            int(experts.len(), "moe experts held"),
        );
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.launch.builder(&self.localize);
        b.arg(src).arg(dst).arg(&ni).arg(&first).arg(&count);
        // SAFETY: moe_localize(src, dst, n, first, count): n ids read and written (checked).
        unsafe { b.launch(cfg) }.during("launching moe localize")?;
        Ok(())
    }
}

/// The checks every routing launch makes of its arguments (`x`: the tokens' rows).
fn check_route_args(
    n: usize,
    router: &MoeRouter,
    bias: Option<&CudaSlice<f32>>,
    work: &MoeRouteWork,
    x: &CudaSlice<f32>,
    ids: &CudaSlice<i32>,
    weights: &CudaSlice<f32>,
) {
    if let Some(b) = bias {
        assert!(
            b.len() >= router.n_expert,
            "moe route: a bias of {}",
            b.len()
        );
    }
    let (ne, d, k) = (router.n_expert, router.n_embd, router.n_used);
    assert!(
        n <= work.max_n && work.n_expert == ne,
        "moe route: {n} tokens of {ne} experts, work for {} of {}",
        work.max_n,
        work.n_expert
    );
    assert!(
        ne <= MOE_MAX_EXPERTS && (1..=ne.min(MOE_MAX_USED)).contains(&k),
        "moe route: {k} of {ne} experts"
    );
    assert!(x.len() >= n * d, "moe route: x too small");
    assert!(
        ids.len() >= n * k && weights.len() >= n * k,
        "moe route: outputs too small"
    );
}

/// The norm [`MoeRoute::add_norm_route`] takes in its launch: `x += add`, then
/// `out = rms_norm(x) * w` and `out`'s activation blocks in `outq`, as `mode` says.
pub struct NormInto<'a> {
    pub x: &'a mut CudaSlice<f32>,
    pub add: &'a CudaSlice<f32>,
    pub w: &'a CudaSlice<f32>,
    pub eps: f32,
    pub out: &'a mut CudaSlice<f32>,
    pub outq: &'a mut CudaSlice<u8>,
    pub mode: ActQuant,
}

/// A router of `n_expert` rows of `n_embd` floats (`len` of them) choosing `n_used`: within
/// the kernels' limits.
fn check_router(len: usize, n_expert: usize, n_embd: usize, n_used: usize) -> Result<()> {
    if len != n_expert * n_embd {
        return Err(CudaError::Invalid(format!(
            "moe router: {len} floats for {n_expert} experts of {n_embd}"
        )));
    }
    if !(1..=MOE_MAX_EXPERTS).contains(&n_expert)
        || !(1..=n_expert.min(MOE_MAX_USED)).contains(&n_used)
    {
        return Err(CudaError::Invalid(format!(
            "moe router: {n_used} of {n_expert} experts (at most {MOE_MAX_USED} of \
             {MOE_MAX_EXPERTS})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::MOE_ROUTE;

    #[test]
    fn router_limits() {
        assert!(check_router(64 * 2048, 64, 2048, 8).is_ok());
        assert!(check_router(128 * 2048, 128, 2048, 8).is_ok());
        assert!(check_router(256 * 16, 256, 16, 32).is_ok());
        let err = |len, e, d, k| check_router(len, e, d, k).unwrap_err().to_string();
        assert!(err(64 * 2048 - 1, 64, 2048, 8).contains("floats"));
        assert!(err(512 * 16, 512, 16, 8).contains("at most"));
        assert!(err(64 * 16, 64, 16, 0).contains("0 of 64"));
        assert!(err(4 * 16, 4, 16, 5).contains("5 of 4"));
        assert!(err(64 * 16, 64, 16, 33).contains("33 of 64"));
    }

    /// The host's limits are the kernel's constants.
    #[test]
    fn limits_match_the_kernel() {
        let src = MOE_ROUTE.source;
        assert!(src.contains("#define TOPK_PER_LANE 8") && MOE_MAX_EXPERTS == 32 * 8);
        assert!(src.contains(&format!("#define ROUTE_SMALL_N {ROUTER_SMALL_N}")));
        assert!(src.contains(&format!("#define TOPK_WARPS {TOPK_WARPS}")));
        assert!(src.contains(&format!("#define ROUTE_THREADS {ROUTE_THREADS}")));
        assert!(src.contains(&format!("#define SMALL_MAX_EMBD {ROUTER_SMALL_MAX_EMBD}")));
        assert!(src.contains(&format!("#define ROUTE_TOPK_BLOCK {ROUTE_TOPK_BLOCK}")));
        assert!(src.contains(&format!("#define ROUTE_KEEP_SUMS {ROUTE_KEEP_SUMS}")));
        assert!(src.contains(&format!("#define ROUTE_SPREAD_OUT {ROUTE_SPREAD_OUT}")));
        assert_eq!(MOE_MAX_USED, 32, "one lane a slot");
    }
}
