//! One layer's attention on the GPU: a single sequence's keys and values stored into its cache
//! and attended over by the kernel the plan picks; several sequences through the batched rows
//! table (`rows.rs`) or one after another.

use super::CudaWeight;
use super::{CudaAct, CudaBackend, CudaCache, CudaInputs};
use crate::error::{DriverContext, Result};
use crate::ops::{ActQuant, AttnSoftmax, DecodeKernel, DecodeRotation, Quantize};
use crate::plan::{Attn, DECODE_MAX_ROWS};
use cudarc::driver::CudaSlice;
use ferrolm_model::backend::{AttnShape, QkRotation, SeqRows};

impl CudaBackend {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn try_attention(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        layer: usize,
        q: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        inp: &CudaInputs,
        shape: AttnShape,
        sm: AttnSoftmax<'_>,
        out: &mut CudaAct,
    ) -> Result<()> {
        let n = q.rows;
        if let [only] = seqs {
            if only.rows == (0..n) {
                let (q, k, v) = (q.buf(), k.buf(), v.buf());
                let pos = inp.positions();
                let c = &mut *only.cache;
                return self.attend_act(c, layer, q, k, v, pos, shape, sm, out, false, None);
            }
        }
        // Several sequences: decode rows in one launch a layer when the pass carries a rows
        // table (the runner built it), else each sequence on its own kernels.
        match inp.rows_table() {
            Some(table) => self.attend_rows(table, seqs, layer, q, k, v, inp, shape, sm, out),
            None => self.attend_each(seqs.iter_mut(), layer, q, k, v, inp, shape, sm, out),
        }
    }

    /// One token of one sequence on the decode walk that norms and rotates its own queries
    /// and key and stores its key and value (`FERROLM_ATTN_ROPE`, [`Plan::attn_rope`]; per-head
    /// norms on the tensor-core walk, whole-row norms on the group block where
    /// [`Plan::attn_rope_rows`]): one launch for the norms' and rotation's, `kv_store`'s and
    /// the walk's, the same bits. `false`
    /// (nothing run) where the plan, the model or the cache takes the three.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rotating_attention(
        &self,
        cache: &mut CudaCache,
        layer: usize,
        [q, k, v]: [&CudaAct; 3],
        rot: &QkRotation<'_, CudaWeight>,
        inp: &CudaInputs,
        shape: AttnShape,
        sm: AttnSoftmax<'_>,
        out: &mut CudaAct,
    ) -> Result<bool> {
        let Some((qn, kn)) = rot.norms else {
            return Ok(false);
        };
        if q.rows != 1 || rot.q_scale.is_some() || !self.plan.attn_rope() {
            return Ok(false);
        }
        let (group, kernel) = {
            let kv = &cache.layers[layer - cache.first_layer];
            let group = shape.n_head / kv.n_kv_head;
            let kernel = match self.plan.attention(1, kv.format, group, kv.head_dim) {
                Attn::Decode { kernel, .. } => Some(kernel),
                Attn::Prefill(_) => None,
            };
            let plain = kv.k_rot.is_none() && kv.v_rot.is_none();
            let ok = plain && !self.plan.round_query(kv.format) && rot.head_dim == kv.head_dim;
            (group, kernel.filter(|_| ok))
        };
        let Some(kernel) = kernel else {
            return Ok(false);
        };
        if kernel == DecodeKernel::Group && !self.plan.attn_rope_rows() {
            return Ok(false);
        }
        let (hd, pos) = (rot.head_dim, inp.positions());
        self.with_rope(inp, hd, &rot.rope, rot.factors, |args| {
            let dr = DecodeRotation {
                k: k.buf(),
                v: v.buf(),
                wq: qn.vector(),
                wk: kn.vector(),
                eps: rot.eps,
                rope: args,
                head_split: self.plan.attn_head_split(),
                bulk: self.plan.attn_bulk(),
            };
            if !dr.takes(&cache.layers[layer - cache.first_layer], group, kernel) {
                return Ok(false);
            }
            let (qb, kb, vb) = (q.buf(), k.buf(), v.buf());
            crate::profile::span(self.dev.stream(), "attention", || {
                self.attend_act(
                    cache,
                    layer,
                    qb,
                    kb,
                    vb,
                    pos,
                    shape,
                    sm,
                    out,
                    true,
                    Some(&dr),
                )
            })?;
            Ok(true)
        })
    }

    /// [`Self::attend`] into `out`, which keeps its values quantized for the product after
    /// attention where decode's combine wrote them ([`Plan::combine_quantizes`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend_act(
        &self,
        cache: &mut CudaCache,
        layer: usize,
        q: &CudaSlice<f32>,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        positions: &CudaSlice<u32>,
        shape: AttnShape,
        sm: AttnSoftmax<'_>,
        out: &mut CudaAct,
        stored: bool,
        rot: Option<&DecodeRotation<'_>>,
    ) -> Result<()> {
        let mode = self.norm_quant(out.width);
        // Only decode's combine writes the copy: a prefill's rows take no buffer for it.
        let decode = out.rows <= DECODE_MAX_ROWS;
        let mut q8 = match decode && self.plan.combine_quantizes() && mode == ActQuant::Q8K {
            true => Some(self.bytes.take(Quantize::q8_1_bytes(out.rows, out.width))?),
            false => None,
        };
        let buf = out.buf_mut(); // drops any quantized copy out had
        let done = self.attend(
            cache,
            layer,
            q,
            k,
            v,
            positions,
            shape,
            sm,
            buf,
            stored,
            q8.as_mut(),
            rot,
        );
        match (done, q8) {
            (Ok(true), Some(q8)) => {
                out.q8 = Some((q8, mode));
                Ok(())
            }
            (done, q8) => {
                if let Some(q8) = q8 {
                    self.bytes.give(q8);
                }
                done.map(|_| ())
            }
        }
    }

    /// Stores one sequence's k/v at its positions (unless `stored`: the rotation's launch
    /// did, `NormRope::rope_qk_store`), then attention of its queries (scaled, windowed and
    /// with sinks as `sm` says). With `q8`, decode's own combine may write the output
    /// quantized as Q8_K there too: the answer says whether it did. With `rot` (one row, a
    /// shape [`Self::rotating_attention`] checked) q and k are the products' rows before their
    /// norms and rotation, which the walk takes with the store ([`Attention::decode`]'s).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend(
        &self,
        cache: &mut CudaCache,
        layer: usize,
        q: &CudaSlice<f32>,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        positions: &CudaSlice<u32>,
        shape: AttnShape,
        sm: AttnSoftmax<'_>,
        out: &mut CudaSlice<f32>,
        stored: bool,
        q8: Option<&mut CudaSlice<u8>>,
        rot: Option<&DecodeRotation<'_>>,
    ) -> Result<bool> {
        let kv = &mut cache.layers[layer - cache.first_layer];
        // A quantized cache holds k and v rotated (llama.cpp's Hadamard rotation): q is
        // rotated as k, the output rotated back; copies, the inputs stay as they are.
        let copy = |x: &CudaSlice<f32>| -> Result<CudaSlice<f32>> {
            let mut t = self.acts.take(x.len())?;
            self.dev
                .stream()
                .memcpy_dtod(x, &mut t)
                .during("copying attention rows")?;
            Ok(t)
        };
        let rotated = |x: &CudaSlice<f32>, rot: Option<usize>| -> Result<Option<CudaSlice<f32>>> {
            let Some(n) = rot else { return Ok(None) };
            let mut t = copy(x)?;
            self.k.elementwise.hadamard(&mut t, n)?;
            Ok(Some(t))
        };
        let mut rq = rotated(q, kv.k_rot)?;
        if self.plan.round_query(kv.format) {
            let mut t = match rq {
                Some(t) => t,
                None => copy(q)?,
            };
            self.k.elementwise.round_q8_0(&mut t)?;
            rq = Some(t);
        }
        let (rk, rv) = (rotated(k, kv.k_rot)?, rotated(v, kv.v_rot)?);
        let (q, k, v) = (
            rq.as_ref().unwrap_or(q),
            rk.as_ref().unwrap_or(k),
            rv.as_ref().unwrap_or(v),
        );
        if !stored && rot.is_none() {
            self.k.attention.store(kv, k, v, positions)?;
        }
        let n_head = shape.n_head;
        let a = &self.k.attention;
        // The rotation back below rewrites out: no quantized copy then.
        let q8 = q8.filter(|_| kv.v_rot.is_none());
        let quantized = match self.plan.attention(
            positions.len(),
            kv.format,
            n_head / kv.n_kv_head,
            kv.head_dim,
        ) {
            Attn::Decode {
                fused_combine,
                kernel,
            } => {
                let work = &mut cache.work;
                let splits = self
                    .plan
                    .window_splits(work.n_split, sm.window, kv.n_kv_head);
                a.decode(
                    fused_combine && self.plan.combine_in_walk(),
                    kernel,
                    q,
                    rot,
                    kv,
                    positions,
                    n_head,
                    sm,
                    splits,
                    work,
                    out,
                    q8,
                )?
            }
            Attn::Prefill(kernel) => {
                a.prefill(kernel, q, kv, positions, n_head, sm, out)?;
                false
            }
        };
        if let Some(n) = kv.v_rot {
            self.k.elementwise.hadamard(out, n)?;
        }
        for t in [rq, rk, rv].into_iter().flatten() {
            self.acts.give(t);
        }
        Ok(quantized)
    }
}
