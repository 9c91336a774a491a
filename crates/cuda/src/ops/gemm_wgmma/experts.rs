//! The experts of an MoE prefill ubatch on the f16 GEMMs (`GemmWgmma::experts`): the pairs'
//! rows in expert order, the grouped GEMMs (expanded or unpacked weights), SwiGLU, the routing
//! weights back in pair order.

use super::{
    f16_map, hopper_only, raw_map, rows_cfg, tiles_cfg, GemmWgmma, TILE_ROWS, TILE_TOKENS,
};
use super::{Q4K_SMEM_BYTES, SMEM_BYTES};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::ops::{int, ExpertEpilogue, MoeExperts, MoeGemm, MoeWork, QuantMatrix};
use cudarc::driver::{CudaSlice, DevicePtr};
use ferrolm_gguf::GgmlType;

/// The expert-sorted pairs of an MoE prefill batch, as `moe_gemm.cu`'s index kernels leave
/// them: `index` = counts[E], offsets[E + 1], ...; `sorted` the pair ids by expert. Only the
/// first offsets[E] positions (pairs that have an expert) are computed.
pub struct ExpertRows<'a> {
    pub index: &'a CudaSlice<i32>,
    pub sorted: &'a CudaSlice<i32>,
    /// Pairs of the batch (tokens × experts a token): the buffers' rows.
    pub pairs: usize,
    pub n_expert: usize,
}

impl GemmWgmma {
    /// `xs[q] = f16(x[sorted[q] / n_used])`: the pairs' activation rows (`x` is `[tokens][n_embd]`)
    /// in expert order.
    pub fn gather(
        &self,
        x: &CudaSlice<f32>,
        rows: &ExpertRows,
        n_used: usize,
        n_embd: usize,
        xs: &mut CudaSlice<u16>,
    ) -> Result<()> {
        assert!(n_embd.is_multiple_of(8), "gather: n_embd {n_embd}");
        assert!(
            x.len() >= rows.pairs / n_used * n_embd,
            "gather: x too small"
        );
        assert!(xs.len() >= rows.pairs * n_embd, "gather: xs too small");
        let (ne, nu, nd) = (
            int(rows.n_expert, "experts"),
            int(n_used, "experts used"),
            int(n_embd, "n_embd"),
        );
        let mut b = self.launch.builder(&self.gather);
        b.arg(x)
            .arg(rows.sorted)
            .arg(rows.index)
            .arg(xs)
            .arg(&ne)
            .arg(&nu)
            .arg(&nd);
        // SAFETY: moe_gather_f16(x, sorted, index, xs, E, n_used, n_embd): the first
        // offsets[E] <= pairs entries of sorted are pair ids < pairs (moe_scatter's), x holds
        // their tokens' rows, xs pairs rows (asserted).
        unsafe { b.launch(rows_cfg(rows.pairs, 128)) }.during("launching moe_gather_f16")?;
        Ok(())
    }

    /// `out[q] = xs[q] · w_eᵀ` for the pair at sorted position q and its expert e, `w16` the
    /// experts' f16 weights stacked (`n_rows` each, `cols` columns).
    pub fn matmul_experts(
        &self,
        xs: &CudaSlice<u16>,
        rows: &ExpertRows,
        w16: &CudaSlice<u16>,
        n_rows: usize,
        cols: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = hopper_only(&self.experts)?;
        assert!(
            cols.is_multiple_of(8) && n_rows.is_multiple_of(2),
            "experts f16: {n_rows}×{cols}"
        );
        assert!(xs.len() >= rows.pairs * cols, "experts f16: xs too small");
        assert!(
            w16.len() >= rows.n_expert * n_rows * cols,
            "experts f16: w too small"
        );
        assert!(
            out.len() >= rows.pairs * n_rows,
            "experts f16: out too small"
        );
        if rows.pairs == 0 {
            return Ok(());
        }
        let stream = self.launch.stream().clone();
        let (xp, _x_sync) = xs.device_ptr(&stream);
        let (wp, _w_sync) = w16.device_ptr(&stream);
        let x_map = f16_map(xp, rows.pairs, cols, TILE_TOKENS as u32)?;
        let w_map = f16_map(wp, rows.n_expert * n_rows, cols, TILE_ROWS as u32)?;
        let cfg = tiles_cfg(expert_slots(rows), n_rows.div_ceil(TILE_ROWS), SMEM_BYTES);
        let (ne, nr, k) = (
            int(rows.n_expert, "experts"),
            int(n_rows, "expert rows"),
            int(cols, "expert cols"),
        );
        let mut b = self.launch.builder(f);
        b.arg(&x_map)
            .arg(&w_map)
            .arg(out)
            .arg(rows.index)
            .arg(&ne)
            .arg(&nr)
            .arg(&k);
        // SAFETY: gemm_wgmma_f16_experts(x_map, w_map, out, index, E, n_rows, k): the maps
        // describe xs (pairs × cols) and w16 (E·n_rows × cols), sizes asserted; a block writes
        // rows q < offsets[E] <= pairs of out (pairs × n_rows, asserted).
        unsafe { b.launch(cfg) }.during("launching gemm_wgmma_f16_experts")?;
        Ok(())
    }

    /// [`matmul_experts`](Self::matmul_experts) of Q4_K experts unpacked in the GEMM: `ws`
    /// one stack (`out` rows of `n_rows`) or two side by side (gate and up: `out` rows of
    /// `2 n_rows`, the second's products from column `n_rows`), each `n_expert × n_rows` rows.
    pub fn matmul_experts_unpacked(
        &self,
        xs: &CudaSlice<u16>,
        rows: &ExpertRows,
        ws: &[&QuantMatrix],
        n_rows: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = hopper_only(&self.q4k_experts)?;
        assert!(matches!(ws.len(), 1 | 2), "experts q4k: {} maps", ws.len());
        // The kernel stores pairs of columns (from an even column of each map's).
        assert!(n_rows.is_multiple_of(2), "experts q4k: {n_rows} rows");
        let cols = ws[0].cols;
        for w in ws {
            assert!(
                w.ty == GgmlType::Q4K && w.rows == rows.n_expert * n_rows && w.cols == cols,
                "experts q4k: {} {}×{} for {} experts of {n_rows}×{cols}",
                w.ty.name(),
                w.rows,
                w.cols,
                rows.n_expert
            );
        }
        assert!(xs.len() >= rows.pairs * cols, "experts q4k: xs too small");
        assert!(
            out.len() >= rows.pairs * ws.len() * n_rows,
            "experts q4k: out too small"
        );
        if rows.pairs == 0 {
            return Ok(());
        }
        let stream = self.launch.stream().clone();
        let (xp, _x_sync) = xs.device_ptr(&stream);
        let x_map = f16_map(xp, rows.pairs, cols, TILE_TOKENS as u32)?;
        let mut maps = Vec::with_capacity(2);
        for w in ws {
            let (wp, _w_sync) = w.data.device_ptr(&stream);
            maps.push(raw_map(wp, w)?);
        }
        let row_tiles = n_rows.div_ceil(TILE_ROWS) * ws.len();
        let cfg = tiles_cfg(expert_slots(rows), row_tiles, Q4K_SMEM_BYTES);
        let (ne, nr, k, nm) = (
            int(rows.n_expert, "experts"),
            int(n_rows, "expert rows"),
            int(cols, "expert cols"),
            ws.len() as i32,
        );
        let mut b = self.launch.builder(f);
        b.arg(&x_map)
            .arg(&maps[0])
            .arg(&maps[maps.len() - 1])
            .arg(out)
            .arg(rows.index)
            .arg(&ne)
            .arg(&nr)
            .arg(&k)
            .arg(&nm);
        // SAFETY: gemm_wgmma_q4k_experts(x_map, w_map0, w_map1, out, index, E, n_rows, k,
        // maps): the maps describe xs (pairs × cols, asserted) and each weight's blocks
        // (E·n_rows rows, asserted; raw_map checks their size); a block writes rows
        // q < offsets[E] <= pairs of out (pairs × maps·n_rows, asserted).
        unsafe { b.launch(cfg) }.during("launching gemm_wgmma_q4k_experts")?;
        Ok(())
    }

    /// `h[q][j] = f16(silu(gu[q][j]) · gu[q][n_ff + j])`: SwiGLU of the interleaved gate and up
    /// products (gpt-oss: the expert's gate and up biases added first, and swiglu_oai; `ep`).
    pub fn swiglu(
        &self,
        gu: &CudaSlice<f32>,
        rows: &ExpertRows,
        n_ff: usize,
        ep: &ExpertEpilogue,
        h: &mut CudaSlice<u16>,
    ) -> Result<()> {
        assert!(
            gu.len() >= rows.pairs * 2 * n_ff,
            "swiglu f16: gu too small"
        );
        assert!(h.len() >= rows.pairs * n_ff, "swiglu f16: h too small");
        let (ne, nf) = (int(rows.n_expert, "experts"), int(n_ff, "n_ff"));
        let (alpha, limit) = ep.act_args();
        let mut b = self.launch.builder(&self.swiglu);
        b.arg(gu)
            .arg(rows.index)
            .arg(h)
            .arg(&ne)
            .arg(&nf)
            .arg(ep.bias(0))
            .arg(ep.bias(1))
            .arg(&alpha)
            .arg(&limit);
        // SAFETY: moe_swiglu_f16(gu, index, h, E, n_ff, gate_bias, up_bias, alpha, limit): rows
        // below offsets[E] <= pairs, sizes asserted; the biases [E][n_ff] floats or null
        // (MoeExperts::check).
        unsafe { b.launch(rows_cfg(rows.pairs, 256)) }.during("launching moe_swiglu_f16")?;
        Ok(())
    }

    /// `y[p] = weights[p] · ys[q]` for `p = sorted[q]`: the down products in pair order, each
    /// scaled by its routing weight (gpt-oss: the expert's down bias added first; `ep`).
    pub fn unsort_weighted(
        &self,
        ys: &CudaSlice<f32>,
        rows: &ExpertRows,
        weights: &CudaSlice<f32>,
        n_embd: usize,
        ep: &ExpertEpilogue,
        y: &mut CudaSlice<f32>,
    ) -> Result<()> {
        assert!(n_embd.is_multiple_of(4), "unsort: n_embd {n_embd}");
        assert!(ys.len() >= rows.pairs * n_embd && y.len() >= rows.pairs * n_embd);
        assert!(weights.len() >= rows.pairs, "unsort: weights too small");
        let (ne, nd) = (int(rows.n_expert, "experts"), int(n_embd, "n_embd"));
        let mut b = self.launch.builder(&self.unsort);
        b.arg(ys)
            .arg(rows.sorted)
            .arg(rows.index)
            .arg(weights)
            .arg(y)
            .arg(&ne)
            .arg(&nd)
            .arg(ep.bias(2));
        // SAFETY: moe_unsort_weighted(ys, sorted, index, weights, y, E, n_embd, down_bias): rows
        // below offsets[E] <= pairs, pair ids < pairs; sizes asserted; the bias [E][n_embd]
        // floats or null (MoeExperts::check).
        unsafe { b.launch(rows_cfg(rows.pairs, 128)) }.during("launching moe_unsort_weighted")?;
        Ok(())
    }
}

/// Scratch of [`GemmWgmma::experts`]: the pairs' rows in expert order (f16), gate and up
/// interleaved and down expanded (f16), the gate/up products (f32), SwiGLU (f16), the down
/// products in sorted order (f32).
pub struct ExpertBufs {
    pub xs: CudaSlice<u16>,
    pub wgu: CudaSlice<u16>,
    pub h: CudaSlice<u16>,
    pub wd: CudaSlice<u16>,
    pub gu: CudaSlice<f32>,
    pub ys: CudaSlice<f32>,
}

impl ExpertBufs {
    /// Elements of xs, wgu, h, wd, gu, ys for `n` tokens through `x`; no f16 copy of weights
    /// the GEMM unpacks itself (`unpack`: gate and up, down; the plan's
    /// [`Plan::f16_experts_unpack`]).
    ///
    /// [`Plan::f16_experts_unpack`]: crate::Plan::f16_experts_unpack
    pub fn lens(n: usize, x: &MoeExperts, unpack: [bool; 2]) -> [usize; 6] {
        let (pairs, d, ff, e) = (n * x.n_used, x.n_embd(), x.n_ff, x.n_expert);
        let [gate_up, down] = unpack;
        [
            pairs * d,
            if gate_up { 0 } else { e * 2 * ff * d },
            pairs * ff,
            if down { 0 } else { e * d * ff },
            pairs * 2 * ff,
            pairs * d,
        ]
    }

    pub fn zeros(dev: &CudaDevice, n: usize, x: &MoeExperts, unpack: [bool; 2]) -> Result<Self> {
        let [xs, wgu, h, wd, gu, ys] = Self::lens(n, x, unpack).map(|l| l.max(1));
        Ok(Self {
            xs: dev.zeros(xs)?,
            wgu: dev.zeros(wgu)?,
            h: dev.zeros(h)?,
            wd: dev.zeros(wd)?,
            gu: dev.zeros(gu)?,
            ys: dev.zeros(ys)?,
        })
    }
}

/// The grouped GEMMs' (expert, token tile) slots: an upper bound on Σ_e ceil(count_e / 128),
/// whose counts are on the device.
fn expert_slots(rows: &ExpertRows) -> usize {
    rows.pairs.div_ceil(TILE_TOKENS) + rows.n_expert
}

impl GemmWgmma {
    /// The MoE FFN of `n` tokens of `x` on the f16 GEMMs, as [`MoeGemm::forward`] computes it
    /// (same routes, same combine) but in f16: the pairs' rows gathered in expert order, gate
    /// and up expanded interleaved so that one grouped GEMM gives both, SwiGLU rounded to f16,
    /// down expanded and multiplied, each pair's product scaled by its routing weight back in
    /// pair order, and `moe_combine` summing the slots in order. Gate and up, and down, are
    /// unpacked in the GEMM instead where `unpack` says so (Q4_K: [`Self::unpacks`]), with
    /// the same bits. Contract: as the dense f16 GEMM's, twice (x and h each rounded to f16).
    #[allow(clippy::too_many_arguments)]
    pub fn experts(
        &self,
        moe: &MoeGemm,
        x: &CudaSlice<f32>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeWork,
        bufs: &mut ExpertBufs,
        unpack: [bool; 2],
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        experts.check();
        let (d, ff, e, k) = (
            experts.n_embd(),
            experts.n_ff,
            experts.n_expert,
            experts.n_used,
        );
        let st = self.launch.stream().clone();
        let [gate_up_unpacked, down_unpacked] = unpack;
        crate::profile::span(&st, "moe.f16.expand", || -> Result<()> {
            if !gate_up_unpacked {
                self.expand_grouped(experts.gate, &mut bufs.wgu, ff, 2 * ff, 0)?;
                self.expand_grouped(experts.up, &mut bufs.wgu, ff, 2 * ff, ff)?;
            }
            if !down_unpacked {
                self.expand(experts.down, &mut bufs.wd)?;
            }
            Ok(())
        })?;
        // Long ubatches: far more pairs than one block indexes.
        crate::profile::span(&st, "moe.index", || moe.build_index(ids, n, work, false))?;
        let (index, sorted, y) = work.index_sorted_y();
        let rows = ExpertRows {
            index,
            sorted,
            pairs: n * k,
            n_expert: e,
        };
        let b = &mut *bufs;
        crate::profile::span(&st, "moe.gate_up", || -> Result<()> {
            self.gather(x, &rows, k, d, &mut b.xs)?;
            if gate_up_unpacked {
                let ws = [experts.gate, experts.up];
                self.matmul_experts_unpacked(&b.xs, &rows, &ws, ff, &mut b.gu)?;
            } else {
                self.matmul_experts(&b.xs, &rows, &b.wgu, 2 * ff, d, &mut b.gu)?;
            }
            self.swiglu(&b.gu, &rows, ff, &experts.epilogue, &mut b.h)
        })?;
        crate::profile::span(&st, "moe.down", || -> Result<()> {
            if down_unpacked {
                self.matmul_experts_unpacked(&b.h, &rows, &[experts.down], d, &mut b.ys)?;
            } else {
                self.matmul_experts(&b.h, &rows, &b.wd, d, ff, &mut b.ys)?;
            }
            self.unsort_weighted(&b.ys, &rows, weights, d, &experts.epilogue, y)
        })?;
        moe.combine(work, ids, n, out)
    }
}
