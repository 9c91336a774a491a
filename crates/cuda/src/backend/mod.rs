//! The CUDA implementation of the model's coarse ops ([`Backend`]), and [`CudaModel`], which
//! runs the shared forward pass on it and replays decode steps as CUDA graphs.
//!
//! Ops only queue work on the device's one stream; the first that fails ends the pass with
//! its error.
//!
//! Token ids and positions are copied to the device once per pass ([`CudaInputs`], made by
//! [`Backend::inputs`]) and the ops read them there. A captured decode graph keeps the inputs
//! it was captured with, so a replay needs only those two values rewritten.

mod act;
mod attention;
mod batch_graph;
mod l2_ahead;
mod matmul;
mod moe;
mod pool;
mod rows;
mod runner;
mod split;
mod weights;

use act::RopeKey;
pub use act::{CudaAct, CudaInputs};
pub use runner::{CudaCache, CudaModel};
pub use split::{CudaSplit, CudaSplitModel, SplitCudaCache};
pub use weights::CudaWeight;

use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::host_logits::{HostLogits, HostLogitsPool};
use crate::ops::{ActQuant, AttnSoftmax, DecodeWork, Kernels, NormRope, Rope, RopeArgs, RopeScale};
use crate::plan::{Plan, DECODE_MAX_ROWS};
use cudarc::driver::CudaSlice;
use ferrolm_model::backend::{
    rope_then_attend, AttnShape, Backend, ColCopy, PassInputs, QkRotation, Rope as ModelRope,
    RopeMode, SeqRows,
};
use ferrolm_model::weights::MoeWeights;
use ferrolm_model::GreedyPick;
use pool::Pool;
use std::cell::Ref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct CudaBackend {
    dev: Arc<CudaDevice>,
    k: Kernels,
    acts: Arc<Pool<f32>>,
    bytes: Arc<Pool<u8>>,
    ids: Pool<i32>,
    /// Pass inputs, and the positions of one sequence of a batch.
    u32s: Arc<Pool<u32>>,
    /// f16 operands of the wgmma GEMM: expanded weights and rounded activations (activations'
    /// f16 copies among them).
    halves: Arc<Pool<u16>>,
    moe: Mutex<moe::MoeScratch>,
    /// The ticket counter of the norm in the q/k/v launch (`Mmvq::norm_triple`): one u32,
    /// zero between launches.
    norm_ticket: Mutex<CudaSlice<u32>>,
    /// The L2 prefetch beside a captured step (`l2_ahead.rs`).
    l2_ahead: l2_ahead::L2AheadState,
    /// Every kernel choice: which kernel, tile and order for a shape, and the fusions.
    plan: Plan,
    /// The GEMM choices of passes of several sequences ([`Plan::for_sequence_batches`]), taken
    /// while `multi_seq` says the pass running is one.
    batch_plan: Plan,
    multi_seq: AtomicBool,
    /// How the fused norms quantize their output: for the matmuls that follow, which the model
    /// sets from its weights ([`Self::set_norm_quant`]); a matmul wanting the other quantizes
    /// again.
    norm_q8k: AtomicBool,
    /// Host buffers for the passes' logits, given back by the callers when they are done
    /// ([`Self::recycle_host`]): page-locked once, or pageable with their pages mapped, from
    /// step to step.
    host_logits: HostLogitsPool,
    /// Where this backend is one rank of a tensor split: the communicator its partial outputs
    /// are summed through ([`Self::join`]).
    comm: std::sync::OnceLock<split::RankComm>,
}

impl CudaBackend {
    pub fn new(dev: Arc<CudaDevice>) -> Result<Self> {
        let (k, plan) = Plan::load(&dev)?;
        crate::profile::set_enabled(plan.profile());
        let stream = dev.stream().clone();
        Ok(Self {
            k,
            acts: Arc::new(Pool::new(stream.clone())),
            bytes: Arc::new(Pool::new(stream.clone())),
            ids: Pool::new(stream.clone()),
            u32s: Arc::new(Pool::new(stream.clone())),
            halves: Arc::new(Pool::new(stream)),
            moe: Mutex::new(moe::MoeScratch::default()),
            norm_ticket: Mutex::new(dev.zeros(1)?),
            l2_ahead: l2_ahead::L2AheadState::new(dev.zeros(3)?),
            batch_plan: plan.for_sequence_batches(),
            plan,
            multi_seq: AtomicBool::new(false),
            norm_q8k: AtomicBool::new(false),
            host_logits: HostLogitsPool::default(),
            comm: std::sync::OnceLock::new(),
            dev,
        })
    }

    /// The activation quantization the fused norms produce (that of the projections after
    /// them).
    pub fn set_norm_quant(&self, mode: ActQuant) {
        self.norm_q8k
            .store(mode == ActQuant::Q8K, Ordering::Relaxed);
    }

    /// What a fused norm over rows of `width` produces.
    fn norm_quant(&self, width: usize) -> ActQuant {
        if self.norm_q8k.load(Ordering::Relaxed) && width.is_multiple_of(256) {
            ActQuant::Q8K
        } else {
            ActQuant::Q8_1
        }
    }

    /// Whether the passes that follow hold several sequences (set by the runner before each
    /// pass): their GEMMs then take [`Plan::for_sequence_batches`]' choices.
    pub(super) fn set_multi_seq(&self, several: bool) {
        self.multi_seq.store(several, Ordering::Relaxed);
    }

    /// The plan a GEMM or MoE choice of the running pass takes.
    fn gemm_plan(&self) -> &Plan {
        if self.multi_seq.load(Ordering::Relaxed) {
            &self.batch_plan
        } else {
            &self.plan
        }
    }

    /// The first `rows` rows of `x` (a padded batch's logits without the padding), timed as
    /// the `to_host` stage, into page-locked memory where the plan says so
    /// (`FERROLM_PINNED_LOGITS`, the default), else pageable.
    pub(super) fn rows_to_host(&self, x: &CudaAct, rows: usize) -> Result<HostLogits> {
        let locked = self.plan.pinned_logits();
        let mut host = self.host_logits.take(rows * x.width, locked);
        let stream = self.dev.stream();
        let filled = crate::profile::span(stream, "to_host", || {
            let shape = (rows, x.width);
            host.fill(self.dev.context(), stream, x.buf(), shape, locked)
        });
        match filled {
            Ok(()) => Ok(host),
            Err(e) => {
                self.host_logits.put(host);
                Err(e)
            }
        }
    }

    /// The greedy choices of the first `rows` rows of `x` (logits), picked on the device
    /// (`greedy_rows_f32`; `banned` taken as -inf for [`GreedyPick::allowed`]): only the picks
    /// cross to the host. Timed as the `to_host` stage it replaces.
    pub(super) fn rows_greedy(
        &self,
        x: &CudaAct,
        rows: usize,
        banned: &[u32],
    ) -> Result<Vec<GreedyPick>> {
        let stream = self.dev.stream();
        let mut on_device = self.u32s.take(banned.len().max(1))?;
        let mut picks = self.u32s.take(2 * rows)?;
        let picked = crate::profile::span(stream, "to_host", || {
            if !banned.is_empty() {
                let mut dst = on_device.slice_mut(..banned.len());
                stream
                    .memcpy_htod(banned, &mut dst)
                    .during("copying the banned ids")?;
            }
            let (ew, n) = (&self.k.elementwise, banned.len());
            ew.greedy_rows(x.buf(), rows, x.width, &on_device, n, &mut picks)?;
            self.dev.download_prefix(&picks, 2 * rows)
        });
        self.u32s.give(on_device);
        self.u32s.give(picks);
        let pairs = picked?;
        let pick = |p: &[u32]| GreedyPick {
            best: p[0],
            allowed: p[1],
        };
        Ok(pairs.chunks_exact(2).map(pick).collect())
    }

    /// Keeps `host` (logits the caller has finished with) for a later [`Self::rows_to_host`].
    pub(super) fn recycle_host(&self, host: HostLogits) {
        self.host_logits.put(host);
    }

    /// `rot`'s norms and RoPE of one sequence's `q` and `k`, with its keys and values stored
    /// in layer `layer` of `cache` in the same launch (`NormRope::rope_qk_store`); `false`
    /// (nothing run) where that kernel does not take this cache or these norms.
    #[allow(clippy::too_many_arguments)]
    fn rope_store(
        &self,
        cache: &mut CudaCache,
        layer: usize,
        q: &mut CudaAct,
        k: &mut CudaAct,
        v: &CudaAct,
        rot: &QkRotation<'_, CudaWeight>,
        inp: &CudaInputs,
    ) -> Result<bool> {
        let kv = &mut cache.layers[layer - cache.first_layer];
        if !NormRope::stores_into(kv) {
            return Ok(false);
        }
        let (hd, rope, factors) = (rot.head_dim, &rot.rope, rot.factors);
        let norms = rot
            .norms
            .map(|(qn, kn)| (qn.vector(), kn.vector(), rot.eps));
        let ran = self.with_rope(inp, hd, rope, factors, |args| {
            crate::profile::span(self.dev.stream(), "rope_store", || {
                let (qb, kb, pos) = (q.buf_mut(), k.buf_mut(), inp.positions());
                self.k
                    .norm_rope
                    .rope_qk_store(qb, kb, v.buf(), norms, hd, pos, args, kv)
                    .transpose()
            })
        })?;
        Ok(ran.is_some())
    }

    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Flash-decoding scratch for one cache of `n_ctx` positions: room for the most rows the
    /// plan sends to decode attention, and the plan's splits for that context.
    pub(super) fn decode_work(
        &self,
        n_head: usize,
        n_kv_head: usize,
        head_dim: usize,
        n_ctx: usize,
    ) -> Result<DecodeWork> {
        let splits = self.plan.decode_splits(n_ctx, n_kv_head);
        DecodeWork::new(&self.dev, DECODE_MAX_ROWS, n_head, head_dim, splits)
    }

    /// Activations holding `x` (`rows × width` host floats).
    pub fn act_from_host(&self, x: &[f32], rows: usize, width: usize) -> Result<CudaAct> {
        assert_eq!(x.len(), rows * width, "act_from_host: shape");
        let mut act = self.try_alloc(rows, width)?;
        self.dev
            .stream()
            .memcpy_htod(x, act.buf_mut())
            .during("copying the residual stream to the device")?;
        Ok(act)
    }

    pub(super) fn set_capturing(&self, on: bool) {
        self.acts.set_capturing(on);
        self.bytes.set_capturing(on);
        self.ids.set_capturing(on);
        self.u32s.set_capturing(on);
        self.halves.set_capturing(on);
    }

    fn try_alloc(&self, n: usize, width: usize) -> Result<CudaAct> {
        let buf = self.acts.take(n * width)?;
        Ok(CudaAct::new(
            buf,
            n,
            width,
            self.acts.clone(),
            self.bytes.clone(),
            self.halves.clone(),
        ))
    }

    /// `f` with the kernels' RoPE arguments for this rotation, the pass's table among them
    /// where the plan takes tables ([`Self::rope_table`]).
    fn with_rope<R>(
        &self,
        inp: &CudaInputs,
        head_dim: usize,
        rope: &ModelRope,
        factors: Option<&CudaWeight>,
        f: impl FnOnce(&RopeArgs<'_>) -> Result<R>,
    ) -> Result<R> {
        let table = self.rope_table(inp, head_dim, rope, factors)?;
        f(&RopeArgs {
            table: table.as_deref(),
            ..rope_args(rope, factors)
        })
    }

    /// The pass's RoPE table for this rotation (made now if the pass has none yet), or `None`
    /// when the plan takes no tables or the pass's table is another rotation's.
    fn rope_table<'a>(
        &self,
        inp: &'a CudaInputs,
        head_dim: usize,
        rope: &ModelRope,
        factors: Option<&CudaWeight>,
    ) -> Result<Option<Ref<'a, CudaSlice<u32>>>> {
        if !self.plan.rope_table() {
            return Ok(None);
        }
        let args = rope_args(rope, factors);
        let s = args.scale;
        let key = RopeKey {
            head_dim,
            base_bits: args.base.to_bits(),
            scale_bits: [
                s.freq_scale,
                s.ext_factor,
                s.mscale,
                s.corr_low,
                s.corr_high,
            ]
            .map(f32::to_bits),
            factors: args
                .factors
                .map_or(0, |f| f as *const CudaSlice<f32> as usize),
        };
        inp.rope_table(key, |buf| {
            crate::profile::span(self.dev.stream(), "rope_table", || {
                self.k
                    .norm_rope
                    .rope_table(buf, head_dim, inp.positions(), &args)
            })
        })
    }

    fn try_select_rows(&self, x: &CudaAct, rows: &[usize]) -> Result<CudaAct> {
        let mut out = self.try_alloc(rows.len(), x.width)?;
        let w = x.width;
        let stream = self.dev.stream();
        // Runs of consecutive rows as one copy each.
        let mut i = 0;
        while i < rows.len() {
            let mut j = i + 1;
            while j < rows.len() && rows[j] == rows[j - 1] + 1 {
                j += 1;
            }
            let src = x.buf().slice(rows[i] * w..(rows[j - 1] + 1) * w);
            let mut dst = out.buf_mut().slice_mut(i * w..j * w);
            stream
                .memcpy_dtod(&src, &mut dst)
                .during("copying selected rows")?;
            i = j;
        }
        Ok(out)
    }
}

impl Backend for CudaBackend {
    type Weight = CudaWeight;
    type Act = CudaAct;
    type Cache = CudaCache;
    type Inputs = CudaInputs;
    type Error = CudaError;

    /// Buffers of the pass's size from the pool, the two copies made now.
    fn inputs(&self, pass: &PassInputs<'_>) -> Result<CudaInputs> {
        let mut inp = CudaInputs::take(&self.u32s, pass.rows())?;
        inp.write(self.dev.stream(), pass)?;
        Ok(inp)
    }

    fn alloc(&self, n: usize, width: usize) -> Result<CudaAct> {
        self.try_alloc(n, width)
    }

    fn embed(&self, table: &CudaWeight, inp: &CudaInputs, out: &mut CudaAct) -> Result<()> {
        crate::profile::span(self.dev.stream(), "embed", || {
            self.k
                .embed
                .gather(table.gather_table(), inp.tokens(), out.buf_mut())
        })
    }

    fn rms_norm(&self, x: &CudaAct, w: &CudaWeight, eps: f32, out: &mut CudaAct) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "norm", || {
            if self.plan.fused_norm(x.width) {
                self.norm_q8(x, w, eps, out, self.norm_quant(x.width))
            } else {
                self.k
                    .norm_rope
                    .rms_norm(x.buf(), w.vector(), eps, out.buf_mut())
            }
        })
    }

    fn add_rms_norm(
        &self,
        acc: &mut CudaAct,
        x: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
    ) -> Result<()> {
        if acc.rows == 0 {
            return Ok(());
        }
        if !self.plan.fused_norm(acc.width) {
            self.add(acc, x)?;
            return self.rms_norm(acc, w, eps, out);
        }
        crate::profile::span(self.dev.stream(), "norm", || {
            self.norm_q8_add(acc, x, w, eps, out, self.norm_quant(acc.width))
        })
    }

    fn norm_project(
        &self,
        acc: &mut CudaAct,
        add: Option<&CudaAct>,
        w: &CudaWeight,
        eps: f32,
        h: &mut CudaAct,
        ws: &[&CudaWeight],
        biases: &[&CudaWeight],
        outs: &mut [&mut CudaAct],
    ) -> Result<()> {
        let fused = crate::profile::span(self.dev.stream(), "matmul", || {
            self.norm_triple(acc, add, w, eps, ws, biases, outs)
        })?;
        if fused {
            return Ok(());
        }
        match add {
            Some(a) => self.add_rms_norm(acc, a, w, eps, h)?,
            None => self.rms_norm(acc, w, eps, h)?,
        }
        self.matmul_many_bias(ws, biases, h, outs)
    }

    fn norm_ffn_glu(
        &self,
        acc: &mut CudaAct,
        add: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        h: &mut CudaAct,
        [wg, wu]: [&CudaWeight; 2],
        gate: &mut CudaAct,
        up: &mut CudaAct,
    ) -> Result<()> {
        let fused = crate::profile::span(self.dev.stream(), "matmul", || {
            self.norm_glu(acc, add, w, eps, [wg, wu], gate)
        })?;
        if fused {
            return Ok(());
        }
        self.add_rms_norm(acc, add, w, eps, h)?;
        self.ffn_glu(wg, wu, h, gate, up)
    }

    fn add_rms_norm_moe(
        &self,
        acc: &mut CudaAct,
        x: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
        moe: &MoeWeights<CudaWeight>,
    ) -> Result<()> {
        if acc.rows == 0 {
            return Ok(());
        }
        let routed = crate::profile::span(self.dev.stream(), "norm", || {
            self.norm_route(acc, x, w, eps, out, moe)
        })?;
        if routed {
            return Ok(());
        }
        self.add_rms_norm(acc, x, w, eps, out)
    }

    fn ffn_glu(
        &self,
        wg: &CudaWeight,
        wu: &CudaWeight,
        x: &CudaAct,
        gate: &mut CudaAct,
        up: &mut CudaAct,
    ) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "ffn.gate_up", || {
            self.glu(wg, wu, x, gate, up)
        })
    }

    fn rms_norm_groups(&self, x: &mut CudaAct, w: &CudaWeight, eps: f32) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "qk_norm", || {
            self.k
                .norm_rope
                .rms_norm_groups(x.buf_mut(), w.vector(), eps)
        })
    }

    fn matmul(&self, w: &CudaWeight, x: &CudaAct, out: &mut CudaAct) -> Result<()> {
        self.matmul_many(&[w], x, &mut [out])
    }

    fn matmul_many(
        &self,
        ws: &[&CudaWeight],
        x: &CudaAct,
        outs: &mut [&mut CudaAct],
    ) -> Result<()> {
        self.matmul_many_bias(ws, &[], x, outs)
    }

    fn matmul_many_bias(
        &self,
        ws: &[&CudaWeight],
        biases: &[&CudaWeight],
        x: &CudaAct,
        outs: &mut [&mut CudaAct],
    ) -> Result<()> {
        crate::profile::span(self.dev.stream(), "matmul", || {
            self.matmul_all(ws, biases, x, outs)
        })
    }

    fn add_bias(&self, x: &mut CudaAct, b: &CudaWeight) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "bias", || {
            self.k.elementwise.add_bias(x.buf_mut(), b.vector())
        })
    }

    fn rope(
        &self,
        x: &mut CudaAct,
        head_dim: usize,
        inp: &CudaInputs,
        rope: &ModelRope,
        factors: Option<&CudaWeight>,
    ) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        self.with_rope(inp, head_dim, rope, factors, |args| {
            crate::profile::span(self.dev.stream(), "rope", || {
                self.k
                    .norm_rope
                    .rope(x.buf_mut(), head_dim, inp.positions(), args)
            })
        })
    }

    fn rope_qk(
        &self,
        q: &mut CudaAct,
        k: &mut CudaAct,
        head_dim: usize,
        inp: &CudaInputs,
        rope: &ModelRope,
        factors: Option<&CudaWeight>,
    ) -> Result<()> {
        if !self.plan.fuse() {
            self.rope(q, head_dim, inp, rope, factors)?;
            return self.rope(k, head_dim, inp, rope, factors);
        }
        if q.rows == 0 {
            return Ok(());
        }
        self.with_rope(inp, head_dim, rope, factors, |args| {
            crate::profile::span(self.dev.stream(), "rope", || {
                let (qb, kb) = (q.buf_mut(), k.buf_mut());
                self.k
                    .norm_rope
                    .rope_qk(qb, kb, head_dim, inp.positions(), args)
            })
        })
    }

    fn qk_norm_rope(
        &self,
        q: &mut CudaAct,
        k: &mut CudaAct,
        q_norm: &CudaWeight,
        k_norm: &CudaWeight,
        eps: f32,
        head_dim: usize,
        inp: &CudaInputs,
        rope: &ModelRope,
        factors: Option<&CudaWeight>,
    ) -> Result<()> {
        let unfused = |b: &Self, q: &mut CudaAct, k: &mut CudaAct| {
            b.rms_norm_groups(q, q_norm, eps)?;
            b.rms_norm_groups(k, k_norm, eps)?;
            b.rope_qk(q, k, head_dim, inp, rope, factors)
        };
        if !self.plan.fuse() {
            return unfused(self, q, k);
        }
        if q.rows == 0 {
            return Ok(());
        }
        let r = self.with_rope(inp, head_dim, rope, factors, |args| {
            crate::profile::span(self.dev.stream(), "qk_norm_rope", || {
                let (wq, wk) = (q_norm.vector(), k_norm.vector());
                let (qb, kb) = (q.buf_mut(), k.buf_mut());
                self.k
                    .norm_rope
                    .qk_norm_rope(qb, wq, kb, wk, eps, head_dim, inp.positions(), args)
                    .transpose()
            })
        })?;
        match r {
            Some(()) => Ok(()),
            None => unfused(self, q, k), // groups that are not whole heads
        }
    }

    fn attention(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        layer: usize,
        q: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        inp: &CudaInputs,
        shape: AttnShape,
        window: Option<usize>,
        sinks: Option<&CudaWeight>,
        out: &mut CudaAct,
    ) -> Result<()> {
        if q.rows == 0 {
            return Ok(());
        }
        let sm = attn_softmax(shape, window, sinks);
        crate::profile::span(self.dev.stream(), "attention", || {
            self.try_attention(seqs, layer, q, k, v, inp, shape, sm, out)
        })
    }

    /// One sequence's pass on an f16 or f32 cache stores its keys and values in the launch
    /// that rotates q and k (`Plan::rope_store`), then attends without a store of its own;
    /// anything else runs the parts.
    fn rope_attention(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        layer: usize,
        [q, k, v]: [&mut CudaAct; 3],
        rot: &QkRotation<'_, CudaWeight>,
        inp: &CudaInputs,
        shape: AttnShape,
        window: Option<usize>,
        sinks: Option<&CudaWeight>,
        out: &mut CudaAct,
    ) -> Result<()> {
        let n = q.rows;
        if let [only] = seqs {
            if only.rows == (0..n) {
                let sm = attn_softmax(shape, window, sinks);
                let qkv = [&*q, &*k, &*v];
                let cache = &mut *only.cache;
                if self.rotating_attention(cache, layer, qkv, rot, inp, shape, sm, out)? {
                    return Ok(());
                }
            }
            if n > 0 && only.rows == (0..n) && self.plan.rope_store() {
                let cache = &mut *only.cache;
                if self.rope_store(cache, layer, q, k, v, rot, inp)? {
                    if let Some(s) = rot.q_scale {
                        self.scale(q, s)?;
                    }
                    let sm = attn_softmax(shape, window, sinks);
                    let (qb, kb, vb, pos) = (q.buf(), k.buf(), v.buf(), inp.positions());
                    return crate::profile::span(self.dev.stream(), "attention", || {
                        self.attend_act(cache, layer, qb, kb, vb, pos, shape, sm, out, true, None)
                    });
                }
            }
        }
        rope_then_attend(
            self,
            seqs,
            layer,
            [q, k, v],
            rot,
            inp,
            shape,
            window,
            sinks,
            out,
        )
    }

    fn swiglu(&self, gate: &mut CudaAct, up: &CudaAct) -> Result<()> {
        if gate.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "swiglu", || {
            self.k.elementwise.swiglu(gate.buf_mut(), up.buf())
        })
    }

    fn geglu(&self, gate: &mut CudaAct, up: &CudaAct) -> Result<()> {
        if gate.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "geglu", || {
            self.k.elementwise.geglu(gate.buf_mut(), up.buf())
        })
    }

    /// deepseek2's latent attention splits and joins its heads' parts with it.
    fn copy_cols(&self, src: &CudaAct, dst: &mut CudaAct, c: ColCopy) -> Result<()> {
        let last = |off: usize, step: usize| off + c.count.saturating_sub(1) * step + c.width;
        if src.rows != dst.rows
            || (c.count > 0
                && (last(c.src_off, c.src_step) > src.width
                    || last(c.dst_off, c.dst_step) > dst.width))
        {
            return Err(CudaError::Invalid(format!(
                "column copy {c:?} between {}x{} and {}x{} activations",
                src.rows, src.width, dst.rows, dst.width
            )));
        }
        let runs = [
            c.width, c.count, c.src_off, c.src_step, c.dst_off, c.dst_step,
        ];
        let (sw, dw) = (src.width, dst.width);
        crate::profile::span(self.dev.stream(), "copy_cols", || {
            self.k
                .elementwise
                .copy_cols(src.buf(), sw, dst.buf_mut(), dw, src.rows, runs)
        })
    }

    fn scale(&self, x: &mut CudaAct, s: f32) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "scale", || {
            self.k.elementwise.scale(x.buf_mut(), s)
        })
    }

    /// The gating mode was fixed when the router was uploaded ([`CudaWeight::Router`]), from
    /// the same architecture `w.gating` comes from; [`Self::try_moe`] checks they agree.
    fn moe(&self, x: &CudaAct, w: &MoeWeights<CudaWeight>, out: &mut CudaAct) -> Result<()> {
        self.try_moe(x, w, out)
    }

    fn add(&self, acc: &mut CudaAct, x: &CudaAct) -> Result<()> {
        if acc.rows == 0 {
            return Ok(());
        }
        crate::profile::span(self.dev.stream(), "add", || {
            self.k.elementwise.add(acc.buf_mut(), x.buf())
        })
    }

    /// NCCL's sum over the split's ranks, on this device's stream (so a captured decode graph
    /// holds it too).
    fn all_reduce(&self, x: &mut CudaAct) -> Result<()> {
        match self.comm.get() {
            Some(comm) if x.rows > 0 => {
                let len = x.rows * x.width;
                crate::profile::span(self.dev.stream(), "all_reduce", || {
                    comm.sum_in_place(x.buf_mut(), len)
                })
            }
            _ => Ok(()),
        }
    }

    fn select_rows(&self, x: &CudaAct, rows: &[usize]) -> Result<CudaAct> {
        self.try_select_rows(x, rows)
    }

    /// A plain copy (dumps and tests); a pass's logits take [`Self::rows_to_host`].
    fn to_host(&self, x: &CudaAct) -> Result<Vec<f32>> {
        self.dev.download_prefix(x.buf(), x.rows * x.width)
    }
}

/// Attention's softmax arguments for a layer of `shape`, its window and sinks.
fn attn_softmax<'a>(
    shape: AttnShape,
    window: Option<usize>,
    sinks: Option<&'a CudaWeight>,
) -> AttnSoftmax<'a> {
    AttnSoftmax {
        scale: shape.scale(),
        window,
        sinks: sinks.map(CudaWeight::vector),
    }
}

/// The model's RoPE as the kernels take it.
fn rope_args<'a>(rope: &ModelRope, factors: Option<&'a CudaWeight>) -> RopeArgs<'a> {
    RopeArgs {
        base: rope.base,
        mode: match rope.mode {
            RopeMode::Normal => Rope::Normal,
            RopeMode::Neox => Rope::Neox,
        },
        scale: RopeScale {
            freq_scale: rope.freq_scale,
            ext_factor: rope.ext_factor,
            mscale: rope.magnitude(),
            corr_low: rope.corr_dims[0],
            corr_high: rope.corr_dims[1],
        },
        factors: factors.map(CudaWeight::vector),
        table: None,
    }
}
