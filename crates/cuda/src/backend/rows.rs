//! Attention of a batch of several sequences: the decode rows of all of them in one launch per
//! layer through a per-row table (`ops::attention_rows`, built once per pass and carried by the
//! pass's [`CudaInputs`]), and each longer sequence (a prefill chunk) on its own kernels over
//! its rows copied out and back.

use super::{CudaAct, CudaBackend, CudaCache, CudaInputs};
use crate::error::{DriverContext, Result};
use crate::ops::{AttnSoftmax, RowSeq, RowsTable};
use crate::plan::{Plan, DECODE_MAX_ROWS};
use cudarc::driver::CudaSlice;
use ferrolm_model::backend::{AttnShape, SeqRows};

/// What the one launch serves of a pass of `n_rows` rows at `positions`: every row of a
/// sequence of at most [`DECODE_MAX_ROWS`] rows, with its cache, its slot among that
/// sequence's rows and its splits (the plan's for its key count); `None` for the rest (longer
/// sequences, padding rows).
pub(super) fn served<'a>(
    plan: &Plan,
    seqs: &'a [SeqRows<'_, CudaCache>],
    positions: &[u32],
    n_rows: usize,
) -> Vec<Option<RowSeq<'a>>> {
    let mut rows: Vec<Option<RowSeq<'a>>> = (0..n_rows).map(|_| None).collect();
    for s in seqs.iter().filter(|s| s.rows.len() <= DECODE_MAX_ROWS) {
        for (slot, r) in s.rows.clone().enumerate() {
            let n_keys = positions[r] as usize + 1;
            rows[r] = Some(RowSeq {
                layers: &s.cache.layers,
                work: &s.cache.work,
                slot,
                n_split: plan.rows_splits(n_keys, s.cache.work.n_split),
            });
        }
    }
    rows
}

impl CudaBackend {
    /// Whether a pass over `seqs` sends its decode rows to one launch a layer: several
    /// sequences, f16 caches of one shape, and the plan's yes for the model's heads.
    pub(super) fn batches_attention(&self, seqs: &[SeqRows<'_, CudaCache>], n_head: usize) -> bool {
        let Some(first) = seqs.first().and_then(|s| s.cache.layers.first()) else {
            return false;
        };
        seqs.len() >= 2
            && self
                .plan
                .batched_attention(first.format, n_head, first.n_kv_head, first.head_dim)
            && seqs.iter().all(|s| {
                s.cache.layers.len() == seqs[0].cache.layers.len()
                    && s.cache.layers.iter().all(|l| l.format == first.format)
            })
    }

    /// The pass's rows table (rows at `positions`) when [`Self::batches_attention`] says so
    /// and some sequence has decode rows; the grid as wide as its rows' most splits.
    pub(super) fn rows_table(
        &self,
        seqs: &[SeqRows<'_, CudaCache>],
        positions: &[u32],
        n_head: usize,
    ) -> Result<Option<RowsTable>> {
        if !self.batches_attention(seqs, n_head) {
            return Ok(None);
        }
        let n_rows = positions.len();
        let rows = served(&self.plan, seqs, positions, n_rows);
        let Some(grid) = rows.iter().flatten().map(|r| r.n_split).max() else {
            return Ok(None);
        };
        let n_layer = seqs[0].cache.layers.len();
        let mut table = RowsTable::new(&self.dev, n_layer, n_rows, grid)?;
        table.write(self.dev.stream(), &rows)?;
        Ok(Some(table))
    }

    /// Attention of a pass that carries a rows table: the served rows' k/v stored and their
    /// attention in one launch each, then every longer sequence on its own kernels.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend_rows(
        &self,
        table: &RowsTable,
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
        let first = &seqs[0].cache;
        let (li, kv) = (layer - first.first_layer, &first.layers[0]);
        let (n_kv_head, head_dim) = (kv.n_kv_head, kv.head_dim);
        let a = &self.k.attention_rows;
        let pos = inp.positions();
        a.store(table, li, k.buf(), v.buf(), pos, n_kv_head, head_dim)?;
        let tensor_cores = self
            .plan
            .attn_tensor_cores(shape.n_head / n_kv_head, head_dim);
        a.decode(
            tensor_cores,
            table,
            li,
            q.buf(),
            pos,
            shape.n_head,
            n_kv_head,
            head_dim,
            sm,
            out.buf_mut(),
        )?;
        let longer = seqs.iter_mut().filter(|s| s.rows.len() > DECODE_MAX_ROWS);
        self.attend_each(longer, layer, q, k, v, inp, shape, sm, out)
    }

    /// Each sequence on its own kernels: its rows copied into buffers of their own (the
    /// kernels take whole buffers), attention, and the output rows copied back.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend_each<'s, 'c: 's>(
        &self,
        seqs: impl Iterator<Item = &'s mut SeqRows<'c, CudaCache>>,
        layer: usize,
        q: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        inp: &CudaInputs,
        shape: AttnShape,
        sm: AttnSoftmax<'_>,
        out: &mut CudaAct,
    ) -> Result<()> {
        let stream = self.dev.stream();
        for s in seqs {
            let r = s.rows.clone();
            if r.is_empty() {
                continue;
            }
            let rows_of = |a: &CudaAct| -> Result<CudaSlice<f32>> {
                let mut t = self.acts.take(r.len() * a.width)?;
                let src = a.buf().slice(r.start * a.width..r.end * a.width);
                stream
                    .memcpy_dtod(&src, &mut t)
                    .during("gathering a sequence's rows")?;
                Ok(t)
            };
            let (tq, tk, tv) = (rows_of(q)?, rows_of(k)?, rows_of(v)?);
            let mut tpos = self.u32s.take(r.len())?;
            stream
                .memcpy_dtod(&inp.positions().slice(r.clone()), &mut tpos)
                .during("gathering a sequence's positions")?;
            let mut tout = self.acts.take(r.len() * out.width)?;
            self.attend(
                s.cache, layer, &tq, &tk, &tv, &tpos, shape, sm, &mut tout, false, None, None,
            )?;
            let w = out.width;
            let mut dst = out.buf_mut().slice_mut(r.start * w..r.end * w);
            stream
                .memcpy_dtod(&tout, &mut dst)
                .during("scattering attention rows")?;
            for t in [tq, tk, tv, tout] {
                self.acts.give(t);
            }
            self.u32s.give(tpos);
        }
        Ok(())
    }
}
