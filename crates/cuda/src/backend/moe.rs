//! The MoE FFN on the GPU: routing (softmax and top-k on the device), then the path the plan
//! picks for the ubatch: the expert mat-vecs for up to [`MOE_DECODE_MAX_TOKENS`] tokens, the
//! expert GEMMs for more (or the mat-vecs in slices, for int8 experts of widths the GEMMs do
//! not take). Nothing here waits for the device, so a decode step with MoE layers
//! is still one graph.

use super::{CudaAct, CudaBackend, CudaWeight};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::ops::{
    ExpertBufs, ExpertEpilogue, MoeDecodeWork, MoeExperts, MoeRouteWork, MoeRouter, MoeSliceWork,
    MoeWork, NormInto, NormRouteHow, Quantize, MOE_DECODE_MAX_TOKENS, MOE_MAX_USED, ROUTER_SMALL_N,
};
use crate::plan::{ExpertGemm, MoePath, MoeShape};
use cudarc::driver::CudaSlice;
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::{MoeAct, MoeGating};
use ferrolm_model::weights::MoeWeights;

/// Scratch of the MoE kernels, shared by every layer (they all have the same shape) and grown
/// to the longest batch seen. A decode step's sizes are reached before its capture, so a
/// captured graph never sees a reallocation.
#[derive(Default)]
pub struct MoeScratch {
    route: Option<MoeRouteWork>,
    /// The choices of the last norm that routed its rows ([`CudaBackend::norm_route`]).
    routed: Option<PreRouted>,
    decode: Option<MoeDecodeWork>,
    slices: Option<MoeSliceWork>,
    gemm: Option<(usize, MoeWork)>,
}

/// Tokens the grouped GEMM's scratch is first sized for (the engine's default ubatch).
const GEMM_MIN_TOKENS: usize = 512;

/// A norm's routing of its few rows, kept for the MoE FFN that reads them.
struct PreRouted {
    ids: CudaSlice<i32>,
    weights: CudaSlice<f32>,
    /// Counts the routings written here; a [`RouteMark`] of another count is stale.
    count: u64,
}

/// On the activations a norm routed ([`CudaAct`]'s `routed`): which routing in the scratch is
/// theirs, of which router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteMark {
    router: usize,
    count: u64,
}

impl RouteMark {
    fn new(router: &MoeRouter, count: u64) -> Self {
        Self {
            router: std::ptr::from_ref(router) as usize,
            count,
        }
    }
}

/// Whether `router` was uploaded for the weights' `gating` (it applies its gating itself).
fn gates_as(router: &MoeRouter, gating: MoeGating) -> bool {
    router.renorm == (gating == MoeGating::SoftmaxTopKRenorm)
        && router.topk_softmax == (gating == MoeGating::TopKSoftmax)
}

/// The routing work, made (or remade) for `n` tokens of `n_expert` experts.
fn route_work<'a>(
    slot: &'a mut Option<MoeRouteWork>,
    dev: &CudaDevice,
    n: usize,
    n_expert: usize,
) -> Result<&'a mut MoeRouteWork> {
    if !matches!(slot, Some(r) if r.max_n >= n && r.n_expert == n_expert) {
        *slot = Some(MoeRouteWork::new(dev, n.max(GEMM_MIN_TOKENS), n_expert)?);
    }
    Ok(slot.as_mut().expect("made above"))
}

impl CudaBackend {
    pub(super) fn try_moe(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        out: &mut CudaAct,
    ) -> Result<()> {
        let n = x.rows;
        if n == 0 {
            return Ok(());
        }
        let CudaWeight::Router(router) = &w.router else {
            return Err(CudaError::Invalid(
                "an MoE router not uploaded as one".into(),
            ));
        };
        let epilogue = expert_epilogue(w)?;
        // The router applies its gating itself (fixed at upload); it must be the weights'.
        if !gates_as(router, w.gating) {
            return Err(CudaError::Invalid(format!(
                "an MoE router uploaded for another gating than {:?}",
                w.gating
            )));
        }
        let experts = MoeExperts {
            gate: w.gate.matrix(),
            up: w.up.matrix(),
            down: w.down.matrix(),
            // A tensor split's rank holds `w.experts` only: the kernels see its local ids.
            n_expert: w.experts.len(),
            n_used: w.n_expert_used,
            n_ff: w.n_ff,
            epilogue,
        };
        let k = w.n_expert_used;
        let mut scratch = self.moe.lock().expect("moe scratch poisoned");
        let scratch = &mut *scratch;
        let dev = &self.dev;

        // Routed by the norm before this FFN (add_rms_norm_moe), or routed here.
        let pre = match (&x.routed, &scratch.routed) {
            (Some(mark), Some(r)) if *mark == RouteMark::new(router, r.count) => Some(r),
            _ => None,
        };
        let mut taken = None;
        let (ids, weights) = match pre {
            Some(r) => (&r.ids, &r.weights),
            None => {
                let mut ids = self.ids.take(n * k)?;
                let mut weights = self.acts.take(n * k)?;
                let route = route_work(&mut scratch.route, dev, n, w.n_expert)?;
                let logits = self.plan.router_logits(n, router.n_embd);
                let bias = w.router_bias.as_ref().map(CudaWeight::vector); // gpt-oss
                crate::profile::span(dev.stream(), "moe.route", || {
                    self.k.moe_route.route_biased(
                        logits,
                        x.buf(),
                        n,
                        router,
                        bias,
                        route,
                        &mut ids,
                        &mut weights,
                    )
                })?;
                // deepseek2's expert_weights_scale, on the gated weights as the CPU (same
                // product).
                if w.weights_scale != 1.0 {
                    self.k.elementwise.scale(&mut weights, w.weights_scale)?;
                }
                let (ids, weights) = taken.insert((ids, weights));
                (&*ids, &*weights)
            }
        };

        // A rank of a tensor split: the chosen experts as indices among its own, -1 for the
        // others' (their slots add nothing here; the ranks' sum adds them).
        let mut local = None;
        let ids = if w.experts != (0..w.n_expert) {
            let mut l = self.ids.take(n * k)?;
            self.k
                .moe_route
                .localize(ids, &mut l, n * k, w.experts.clone())?;
            &*local.insert(l)
        } else {
            ids
        };
        let path = self.gemm_plan().moe(&MoeShape::new(&experts, n));
        let r = match path {
            MoePath::MatVec(how) | MoePath::MatVecSlices(how) => {
                let decode = match &mut scratch.decode {
                    Some(d) if d.n_used == k && d.n_ff == w.n_ff && d.n_embd == x.width => d,
                    slot => slot.insert(MoeDecodeWork::new(dev, MOE_DECODE_MAX_TOKENS, &experts)?),
                };
                let o = out.buf_mut();
                let slices = match (&path, &mut scratch.slices) {
                    (MoePath::MatVec(_), _) => None,
                    (_, Some(s)) if s.n_used == k && s.n_embd == x.width => Some(s),
                    (_, slot) => Some(slot.insert(MoeSliceWork::new(dev, &experts)?)),
                };
                self.with_q8(x, how.x_quant, |xq| {
                    crate::profile::span(dev.stream(), "moe.decode", || {
                        let md = &self.k.moe_decode;
                        match slices {
                            None => md.forward_over(&how, xq, n, ids, weights, &experts, decode, o),
                            // The slices add into their output, as into a residual.
                            Some(s) => {
                                dev.stream()
                                    .memset_zeros(o)
                                    .during("clearing the MoE output")?;
                                md.forward_slices(&how, xq, n, ids, weights, &experts, decode, s, o)
                            }
                        }
                    })
                })
            }
            MoePath::F16 => {
                let gemm = gemm_work(&mut scratch.gemm, dev, n, &experts)?;
                self.moe_f16(x, ids, weights, &experts, gemm, out.buf_mut())
            }
            MoePath::Gemm(how) => {
                let gemm = gemm_work(&mut scratch.gemm, dev, n, &experts)?;
                // The norm's blocks where it quantized x as the experts want.
                let xq = match (&x.q8, how) {
                    (Some((q, m)), ExpertGemm::Int8 { x_quant, .. })
                        if *m == x_quant && self.plan.moe_step_fuse() =>
                    {
                        Some(q)
                    }
                    _ => None,
                };
                self.k.moe_gemm.forward(
                    &how,
                    x.buf(),
                    xq,
                    n,
                    ids,
                    weights,
                    &experts,
                    gemm,
                    out.buf_mut(),
                )
            }
        };
        if let Some((ids, weights)) = taken {
            self.ids.give(ids);
            self.acts.give(weights);
        }
        if let Some(l) = local {
            self.ids.give(l);
        }
        r
    }

    /// `acc += x`, `out = rms_norm(acc) * w` (with `out`'s activation blocks), and the routing
    /// of `out`'s rows for the MoE FFN `moe`, in one launch where the plan's `norm_route`
    /// says: the choices stay in the scratch, marked on `out`, for [`Self::try_moe`] on `out`.
    /// Elsewhere nothing is launched and it returns false (the caller takes the norm alone).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm_route(
        &self,
        acc: &mut CudaAct,
        x: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
        moe: &MoeWeights<CudaWeight>,
    ) -> Result<bool> {
        let n = acc.rows;
        let CudaWeight::Router(router) = &moe.router else {
            return Ok(false);
        };
        // deepseek2's weights scale stays with the routing in try_moe; the router's gating
        // must be the weights' (try_moe refuses it otherwise).
        if !self.plan.norm_route(n, acc.width)
            || moe.weights_scale != 1.0
            || !gates_as(router, moe.gating)
            || router.n_embd != acc.width
            || moe.n_expert_used > MOE_MAX_USED
        {
            return Ok(false);
        }
        let mode = self.norm_quant(acc.width);
        let cluster = self.plan.norm_route_cluster(n, acc.width, moe.n_expert);
        let mut q8 = self.bytes.take(Quantize::q8_1_bytes(out.rows, out.width))?;
        let mut scratch = self.moe.lock().expect("moe scratch poisoned");
        let scratch = &mut *scratch;
        let route = route_work(&mut scratch.route, &self.dev, n, moe.n_expert)?;
        let pre = match &mut scratch.routed {
            Some(r) => r,
            slot => slot.insert(PreRouted {
                ids: self.dev.zeros(ROUTER_SMALL_N * MOE_MAX_USED)?,
                weights: self.dev.zeros(ROUTER_SMALL_N * MOE_MAX_USED)?,
                count: 0,
            }),
        };
        let bias = moe.router_bias.as_ref().map(CudaWeight::vector); // gpt-oss
        let norm = NormInto {
            x: acc.buf_mut(),
            add: x.buf(),
            w: w.vector(),
            eps,
            out: out.buf_mut(),
            outq: &mut q8,
            mode,
        };
        let how = NormRouteHow {
            cluster,
            topk_block: self.plan.route_topk_block(),
            keep_sums: self.plan.route_keep_sums(),
            spread_out: self.plan.route_spread_out(),
        };
        let progress = self.l2_progress();
        let r = self.k.moe_route.add_norm_route(
            norm,
            how,
            n,
            router,
            bias,
            route,
            &mut pre.ids,
            &mut pre.weights,
            progress.as_deref(),
        );
        pre.count += 1;
        out.q8 = Some((q8, mode));
        out.routed = Some(RouteMark::new(router, pre.count));
        r.map(|()| true)
    }
}

impl CudaBackend {
    /// The experts of a long ubatch on the f16 GEMMs ([`GemmWgmma::experts`]), their scratch
    /// from the pools.
    fn moe_f16(
        &self,
        x: &CudaAct,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let unpack = self.plan.f16_experts_unpack(experts);
        let [xs, wgu, h, wd, gu, ys] = ExpertBufs::lens(x.rows, experts, unpack);
        let mut bufs = ExpertBufs {
            xs: self.halves.take(xs)?,
            wgu: self.halves.take(wgu)?,
            h: self.halves.take(h)?,
            wd: self.halves.take(wd)?,
            gu: self.acts.take(gu)?,
            ys: self.acts.take(ys)?,
        };
        let done = self.k.gemm_wgmma.experts(
            &self.k.moe_gemm,
            x.buf(),
            x.rows,
            ids,
            weights,
            experts,
            work,
            &mut bufs,
            unpack,
            out,
        );
        let ExpertBufs {
            xs,
            wgu,
            h,
            wd,
            gu,
            ys,
        } = bufs;
        for b in [xs, wgu, h, wd] {
            self.halves.give(b);
        }
        self.acts.give(gu);
        self.acts.give(ys);
        done
    }
}

/// The grouped GEMM's scratch, made (or remade larger) for `n` tokens.
fn gemm_work<'a>(
    slot: &'a mut Option<(usize, MoeWork)>,
    dev: &CudaDevice,
    n: usize,
    experts: &MoeExperts,
) -> Result<&'a mut MoeWork> {
    if !matches!(slot, Some((max, _)) if *max >= n) {
        let max = n.max(GEMM_MIN_TOKENS);
        *slot = Some((max, MoeWork::new(dev, max, experts)?));
    }
    Ok(&mut slot.as_mut().expect("made above").1)
}

/// gpt-oss's expert biases (f32 `[n_expert][width]` matrices on the device) and activation, as
/// the expert kernels take them.
fn expert_epilogue(w: &MoeWeights<CudaWeight>) -> Result<ExpertEpilogue<'_>> {
    let biases = match &w.biases {
        None => None,
        Some(b) => {
            let [g, u, d] = [&b[0], &b[1], &b[2]].map(|b| match b {
                CudaWeight::Matrix { mat, .. } if mat.ty == GgmlType::F32 => Some(&mat.data),
                _ => None,
            });
            match (g, u, d) {
                (Some(g), Some(u), Some(d)) => Some([g, u, d]),
                _ => {
                    return Err(CudaError::Invalid(
                        "expert biases not held as f32 matrices".into(),
                    ))
                }
            }
        }
    };
    let swiglu_oai = match w.act {
        MoeAct::Swiglu => None,
        MoeAct::SwigluOai { alpha, limit } => Some((alpha, limit)),
    };
    Ok(ExpertEpilogue { biases, swiglu_oai })
}
