//! `kernels/gemm_wgmma.cu`: long prefill ubatches on Hopper's warpgroup MMA in f16. The
//! quantized weight is expanded to f16 in a scratch buffer (`dequant_f16_<s>`), the f32
//! activations rounded to f16 (`round_f16`), and `gemm_wgmma_f16` multiplies the two with
//! tiles brought in by the bulk tensor copy (TMA) into a ring of shared-memory stages.
//! Whether a product takes it is the plan's (`Plan::f16_gemm`). Q4_K experts are instead
//! unpacked from their blocks inside the GEMM (`gemm_wgmma_q4k_experts`, `Plan::f16_unpack`),
//! with the same bits and no f16 copy of the weights.
//!
//! Contract: tensor-core, not the CPU's bits. Each product is of the weight as ferrolm-quant
//! dequantizes it and of the f32 activation, both rounded to f16 (2^-11 relative each), summed
//! in f32: within 1e-3 of `Σ|w·x|` of the exact product (`cuda-parity`'s `gemm f16` rows). The
//! CPU quantizes the activations to 8 bits instead, so against the CPU both differ from the
//! exact product, this one by less.

use super::launch::Launcher;
use super::mmq::GemmFn;
use super::{int, kernel_suffix, stride_blocks, MoeExperts, MoeGemm, MoeWork, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::GEMM_WGMMA;
use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Tokens and weight rows of one block's tile (the kernel's WG_BM, WG_BN), and the columns a
/// stage brings in (WG_BK: one 128-byte swizzled row of f16).
const TILE_TOKENS: usize = 128;
const TILE_ROWS: usize = 256;
const STAGE_COLS: u32 = 64;
/// The kernel's WG_SMEM: four stages of 48 KB, their barriers and the two raw slots' (unused
/// here), 1 KB for alignment.
const SMEM_BYTES: usize = 4 * (TILE_TOKENS + TILE_ROWS) * 64 * 2 + (2 * 4 + 2) * 8 + 1024;
/// Bytes of a Q4_K block (the kernel's WQ_BLOCK_BYTES): a raw box is one block of each of a
/// tile's rows.
const Q4K_BLOCK_BYTES: u32 = 144;
/// The kernel's WQ_SMEM: three f16 stages, two raw slots of a Q4_K block of each of the tile's
/// rows, the barriers, 1 KB for alignment.
const Q4K_SMEM_BYTES: usize = 3 * (TILE_TOKENS + TILE_ROWS) * 64 * 2
    + 2 * TILE_ROWS * Q4K_BLOCK_BYTES as usize
    + (2 * 3 + 2) * 8
    + 1024;
/// Producer warpgroup and two consumer warpgroups.
const THREADS: u32 = 384;

/// A `CUtensorMap` passed by value (the kernel's `TmaMap`: 128 bytes, 64-byte aligned).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TmaMapArg {
    words: [u64; 16],
}

pub struct GemmWgmma {
    launch: Launcher,
    /// `None` off Hopper (the kernel body is compiled for sm_90a only).
    gemm: Option<GemmFn>,
    round: CudaFunction,
    /// Format -> `dequant_f16_<s>`.
    dequant: HashMap<GgmlType, CudaFunction>,
    /// The experts' grouped GEMM and the kernels around it (see [`ExpertRows`]).
    experts: Option<GemmFn>,
    gather: CudaFunction,
    swiglu: CudaFunction,
    unsort: CudaFunction,
    /// The GEMMs that unpack Q4_K weights themselves (no f16 copy of the weight).
    q4k: Option<GemmFn>,
    q4k_experts: Option<GemmFn>,
}

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
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let hopper = dev.compute_capability() == (9, 0);
        let load = |name: &str| -> Result<Option<GemmFn>> {
            if hopper {
                GemmFn::load(dev, &GEMM_WGMMA, name, SMEM_BYTES, THREADS).map(Some)
            } else {
                Ok(None)
            }
        };
        let gemm = load("gemm_wgmma_f16")?;
        let experts = load("gemm_wgmma_f16_experts")?;
        let load_q4k = |name: &str| -> Result<Option<GemmFn>> {
            if hopper {
                GemmFn::load(dev, &GEMM_WGMMA, name, Q4K_SMEM_BYTES, THREADS).map(Some)
            } else {
                Ok(None)
            }
        };
        let q4k = load_q4k("gemm_wgmma_q4k")?;
        let q4k_experts = load_q4k("gemm_wgmma_q4k_experts")?;
        let mut dequant = HashMap::new();
        for ty in super::formats::with(|f| f.gemm_f16) {
            let name = format!("dequant_f16_{}", kernel_suffix(ty));
            dequant.insert(ty, dev.function(&GEMM_WGMMA, &name)?);
        }
        Ok(Self {
            launch: launch.clone(),
            gemm,
            round: dev.function(&GEMM_WGMMA, "round_f16")?,
            dequant,
            experts,
            gather: dev.function(&GEMM_WGMMA, "moe_gather_f16")?,
            swiglu: dev.function(&GEMM_WGMMA, "moe_swiglu_f16")?,
            unsort: dev.function(&GEMM_WGMMA, "moe_unsort_weighted")?,
            q4k,
            q4k_experts,
        })
    }

    /// Whether this device runs the GEMM at all (Hopper, and its shared memory fits).
    pub fn available(&self) -> bool {
        [&self.gemm, &self.experts, &self.q4k, &self.q4k_experts]
            .iter()
            .all(|g| g.as_ref().is_some_and(|g| g.f.is_some()))
    }

    /// Whether a `ty` weight of `rows` × `cols` can take it: a format expanded to f16, a
    /// row stride the tensor copy takes (cols a multiple of 8: 16 bytes of f16), an even
    /// number of rows (the kernel writes pairs), and neither empty.
    pub fn supports(ty: GgmlType, rows: usize, cols: usize) -> bool {
        super::formats::has(ty, |f| f.gemm_f16)
            && cols > 0
            && cols.is_multiple_of(8)
            && rows > 0
            && rows.is_multiple_of(2)
    }

    /// Whether the GEMM unpacks `ty` weights itself (from their blocks, in shared memory)
    /// rather than multiplying an f16 copy: Q4_K, whose block (144 bytes) the copy engine
    /// brings in as one box column. The products are the same bits either way.
    pub fn unpacks(ty: GgmlType) -> bool {
        ty == GgmlType::Q4K
    }

    /// `out[i] = f16(x[i])` for the first `len` elements (`len` a multiple of 8).
    pub fn round_f16(
        &self,
        x: &CudaSlice<f32>,
        len: usize,
        out: &mut CudaSlice<u16>,
    ) -> Result<()> {
        assert!(
            len.is_multiple_of(8),
            "round_f16: {len} is not a multiple of 8"
        );
        assert!(
            x.len() >= len && out.len() >= len,
            "round_f16: buffers too small"
        );
        let n = len as u64;
        let cfg = LaunchConfig {
            grid_dim: (stride_blocks(len / 8, 256).min(4096), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.launch.builder(&self.round);
        b.arg(x).arg(out).arg(&n);
        // SAFETY: round_f16(x, y, n): x and y hold at least n elements (asserted).
        unsafe { b.launch(cfg) }.during("launching round_f16")?;
        Ok(())
    }

    /// `out` = `w` as f16, `[rows][cols]`.
    pub fn expand(&self, w: &QuantMatrix, out: &mut CudaSlice<u16>) -> Result<()> {
        self.expand_grouped(w, out, w.rows, w.rows, 0)
    }

    /// `w` as f16 into `out`, row r at row `(r / group) * stride + offset + r % group` (the
    /// experts' gate and up interleaved, `group` rows each).
    pub fn expand_grouped(
        &self,
        w: &QuantMatrix,
        out: &mut CudaSlice<u16>,
        group: usize,
        stride: usize,
        offset: usize,
    ) -> Result<()> {
        let f = self.dequant.get(&w.ty).ok_or_else(|| {
            CudaError::Invalid(format!("no f16 expansion of {} weights", w.ty.name()))
        })?;
        assert!(
            group > 0 && w.rows.is_multiple_of(group) && offset + group <= stride,
            "expand: groups of {group} rows at {offset} of {stride}"
        );
        assert!(
            out.len() >= w.rows / group * stride * w.cols,
            "expand: out too small"
        );
        assert!(
            w.cols.is_multiple_of(w.ty.block_elems())
                && w.data.len() >= w.rows * (w.cols / w.ty.block_elems() * w.ty.block_bytes()),
            "expand: weight of another size"
        );
        let cfg = rows_cfg(w.rows, 128);
        let (rows, cols) = (int(w.rows, "expand rows"), int(w.cols, "expand cols"));
        let (group, stride, offset) = (
            int(group, "expand group"),
            int(stride, "expand stride"),
            int(offset, "expand offset"),
        );
        let mut b = self.launch.builder(f);
        b.arg(&w.data)
            .arg(out)
            .arg(&rows)
            .arg(&cols)
            .arg(&group)
            .arg(&stride)
            .arg(&offset);
        // SAFETY: dequant_f16_<s>(w, out, rows, cols, group, stride, offset): w holds rows
        // whole rows of blocks (asserted), out the rows / group groups of stride rows of cols
        // f16 (asserted); blocks hold a multiple of 8 elements.
        unsafe { b.launch(cfg) }.during("launching dequant_f16")?;
        Ok(())
    }

    /// `out[t][r] = Σ_c x16[t][c] · w16[r][c]` for `n` tokens and `rows` weight rows of `cols`
    /// f16 columns.
    pub fn matmul(
        &self,
        x16: &CudaSlice<u16>,
        n: usize,
        w16: &CudaSlice<u16>,
        rows: usize,
        cols: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = hopper_only(&self.gemm)?;
        assert!(
            cols.is_multiple_of(8) && rows.is_multiple_of(2),
            "gemm f16: {rows}×{cols}"
        );
        assert!(x16.len() >= n * cols, "gemm f16: x too small");
        assert!(w16.len() >= rows * cols, "gemm f16: w too small");
        assert!(out.len() >= n * rows, "gemm f16: out too small");
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let stream = self.launch.stream().clone();
        let (xp, _x_sync) = x16.device_ptr(&stream);
        let (wp, _w_sync) = w16.device_ptr(&stream);
        let x_map = f16_map(xp, n, cols, TILE_TOKENS as u32)?;
        let w_map = f16_map(wp, rows, cols, TILE_ROWS as u32)?;
        let cfg = LaunchConfig {
            // Token tiles fastest: the blocks running at once share few weight tiles, which
            // are then read from memory about once.
            grid_dim: (
                int(n.div_ceil(TILE_TOKENS), "gemm f16 token tiles") as u32,
                int(rows.div_ceil(TILE_ROWS), "gemm f16 row tiles") as u32,
                1,
            ),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: SMEM_BYTES as u32,
        };
        let (ntok, nrows, k) = (
            int(n, "gemm f16 tokens"),
            int(rows, "gemm f16 rows"),
            int(cols, "gemm f16 cols"),
        );
        let mut b = self.launch.builder(f);
        b.arg(&x_map)
            .arg(&w_map)
            .arg(out)
            .arg(&ntok)
            .arg(&nrows)
            .arg(&k);
        // SAFETY: gemm_wgmma_f16(x_map, w_map, out, n_tok, n_rows, k): the maps describe x16
        // (n × cols) and w16 (rows × cols), whose sizes are asserted, and the copy engine fills
        // boxes past their ends with zeros; out holds n × rows floats and the kernel writes
        // only t < n, r < rows.
        unsafe { b.launch(cfg) }.during("launching gemm_wgmma_f16")?;
        Ok(())
    }

    /// [`matmul`](Self::matmul) of `w` (Q4_K, [`unpacks`](Self::unpacks)) unpacked in the
    /// GEMM: the same bits as expanding it first. For `cuda-parity`'s rows and timing: the
    /// plan expands dense weights (each token tile would unpack the weight again).
    pub fn matmul_unpacked(
        &self,
        x16: &CudaSlice<u16>,
        n: usize,
        w: &QuantMatrix,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = hopper_only(&self.q4k)?;
        let (rows, cols) = (w.rows, w.cols);
        assert!(x16.len() >= n * cols, "gemm q4k: x too small");
        assert!(out.len() >= n * rows, "gemm q4k: out too small");
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let stream = self.launch.stream().clone();
        let (xp, _x_sync) = x16.device_ptr(&stream);
        let (wp, _w_sync) = w.data.device_ptr(&stream);
        let x_map = f16_map(xp, n, cols, TILE_TOKENS as u32)?;
        let w_map = q4k_map(wp, w)?;
        let cfg = LaunchConfig {
            grid_dim: (
                int(n.div_ceil(TILE_TOKENS), "gemm q4k token tiles") as u32,
                int(rows.div_ceil(TILE_ROWS), "gemm q4k row tiles") as u32,
                1,
            ),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: Q4K_SMEM_BYTES as u32,
        };
        let (ntok, nrows, k) = (
            int(n, "gemm q4k tokens"),
            int(rows, "gemm q4k rows"),
            int(cols, "gemm q4k cols"),
        );
        let mut b = self.launch.builder(f);
        b.arg(&x_map)
            .arg(&w_map)
            .arg(out)
            .arg(&ntok)
            .arg(&nrows)
            .arg(&k);
        // SAFETY: gemm_wgmma_q4k(x_map, w_map, out, n_tok, n_rows, k): the maps describe x16
        // (n × cols f16, asserted) and w's blocks (q4k_map checks their size); the copy
        // engine fills boxes past the ends with zeros; out holds n × rows floats, and only
        // t < n, r < rows are written.
        unsafe { b.launch(cfg) }.during("launching gemm_wgmma_q4k")?;
        Ok(())
    }
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
        let cfg = LaunchConfig {
            // An upper bound on Σ_e ceil(count_e / 128): the counts are on the device.
            grid_dim: (
                int(
                    rows.pairs.div_ceil(TILE_TOKENS) + rows.n_expert,
                    "expert tiles",
                ) as u32,
                int(n_rows.div_ceil(TILE_ROWS), "expert row tiles") as u32,
                1,
            ),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: SMEM_BYTES as u32,
        };
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
        let cols = ws[0].cols;
        for w in ws {
            assert!(
                w.rows == rows.n_expert * n_rows && w.cols == cols,
                "experts q4k: {}×{} for {} experts of {n_rows}×{cols}",
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
            maps.push(q4k_map(wp, w)?);
        }
        let tiles = n_rows.div_ceil(TILE_ROWS);
        let cfg = LaunchConfig {
            grid_dim: (
                int(
                    rows.pairs.div_ceil(TILE_TOKENS) + rows.n_expert,
                    "expert tiles",
                ) as u32,
                int(tiles * ws.len(), "expert row tiles") as u32,
                1,
            ),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: Q4K_SMEM_BYTES as u32,
        };
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
        // (E·n_rows rows, asserted; q4k_map checks their size); a block writes rows
        // q < offsets[E] <= pairs of out (pairs × maps·n_rows, asserted).
        unsafe { b.launch(cfg) }.during("launching gemm_wgmma_q4k_experts")?;
        Ok(())
    }

    /// `h[q][j] = f16(silu(gu[q][j]) · gu[q][n_ff + j])`: SwiGLU of the interleaved gate and up
    /// products.
    pub fn swiglu(
        &self,
        gu: &CudaSlice<f32>,
        rows: &ExpertRows,
        n_ff: usize,
        h: &mut CudaSlice<u16>,
    ) -> Result<()> {
        assert!(
            gu.len() >= rows.pairs * 2 * n_ff,
            "swiglu f16: gu too small"
        );
        assert!(h.len() >= rows.pairs * n_ff, "swiglu f16: h too small");
        let (ne, nf) = (int(rows.n_expert, "experts"), int(n_ff, "n_ff"));
        let mut b = self.launch.builder(&self.swiglu);
        b.arg(gu).arg(rows.index).arg(h).arg(&ne).arg(&nf);
        // SAFETY: moe_swiglu_f16(gu, index, h, E, n_ff): rows below offsets[E] <= pairs, sizes
        // asserted.
        unsafe { b.launch(rows_cfg(rows.pairs, 256)) }.during("launching moe_swiglu_f16")?;
        Ok(())
    }

    /// `y[p] = weights[p] · ys[q]` for `p = sorted[q]`: the down products in pair order, each
    /// scaled by its routing weight.
    pub fn unsort_weighted(
        &self,
        ys: &CudaSlice<f32>,
        rows: &ExpertRows,
        weights: &CudaSlice<f32>,
        n_embd: usize,
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
            .arg(&nd);
        // SAFETY: moe_unsort_weighted(ys, sorted, index, weights, y, E, n_embd): rows below
        // offsets[E] <= pairs, pair ids < pairs; sizes asserted.
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
        crate::profile::span(&st, "moe.index", || moe.build_index(ids, n, work))?;
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
            self.swiglu(&b.gu, &rows, ff, &mut b.h)
        })?;
        crate::profile::span(&st, "moe.down", || -> Result<()> {
            if down_unpacked {
                self.matmul_experts_unpacked(&b.h, &rows, &[experts.down], d, &mut b.ys)?;
            } else {
                self.matmul_experts(&b.h, &rows, &b.wd, d, ff, &mut b.ys)?;
            }
            self.unsort_weighted(&b.ys, &rows, weights, d, y)
        })?;
        moe.combine(work, ids, n, out)
    }
}

/// The GEMM entry point, or why it does not run here (not Hopper, or too little shared
/// memory).
fn hopper_only(g: &Option<GemmFn>) -> Result<&CudaFunction> {
    match g {
        Some(g) => g.get("the f16 wgmma GEMM"),
        None => Err(CudaError::Invalid(
            "the f16 wgmma GEMM runs on Hopper (sm_90) only".into(),
        )),
    }
}

/// A launch of a block a row (grid-stride past 65,535 rows) of `threads` threads.
fn rows_cfg(rows: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.clamp(1, 65_535) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The tensor map of a row-major f16 matrix `[rows][cols]` at device address `addr`, read in
/// boxes of `box_rows` rows × 64 columns in the 128-byte swizzle the kernel's MMAs expect.
fn f16_map(addr: sys::CUdeviceptr, rows: usize, cols: usize, box_rows: u32) -> Result<TmaMapArg> {
    let mut map = TmaMapArg { words: [0; 16] };
    let dims = [cols as u64, rows as u64];
    let strides = [cols as u64 * 2];
    let boxes = [STAGE_COLS, box_rows];
    let steps = [1u32, 1];
    // SAFETY: every pointer is to a live local of the length the rank (2) asks for; the
    // driver writes only the 128-byte map.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            (&mut map as *mut TmaMapArg).cast::<sys::CUtensorMap>(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            2,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .during(format!(
        "describing a {rows}×{cols} f16 matrix for the copy engine"
    ))?;
    Ok(map)
}

/// The tensor map of a Q4_K matrix's blocks at device address `addr`, as bytes
/// `[rows][cols / 256 · 144]`, read in boxes of one block × [`TILE_ROWS`] rows, unswizzled.
fn q4k_map(addr: sys::CUdeviceptr, w: &QuantMatrix) -> Result<TmaMapArg> {
    assert!(
        w.ty == GgmlType::Q4K && w.cols.is_multiple_of(256),
        "q4k map of {} {}×{}",
        w.ty.name(),
        w.rows,
        w.cols
    );
    let row_bytes = w.cols / 256 * Q4K_BLOCK_BYTES as usize;
    assert!(
        w.data.len() >= w.rows * row_bytes,
        "q4k map: weight of another size"
    );
    let mut map = TmaMapArg { words: [0; 16] };
    let dims = [row_bytes as u64, w.rows as u64];
    let strides = [row_bytes as u64];
    let boxes = [Q4K_BLOCK_BYTES, TILE_ROWS as u32];
    let steps = [1u32, 1];
    // SAFETY: as f16_map's.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            (&mut map as *mut TmaMapArg).cast::<sys::CUtensorMap>(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            2,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .during(format!(
        "describing a {}×{} Q4_K matrix for the copy engine",
        w.rows, w.cols
    ))?;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tile and shared-memory sizes here are the kernel's `#define`s.
    #[test]
    fn sizes_match_the_kernel() {
        let define = |name: &str| -> usize {
            let line = GEMM_WGMMA
                .source
                .lines()
                .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("#define {name}"));
            line.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name} = {line}"))
        };
        assert_eq!(define("WG_BM"), TILE_TOKENS);
        assert_eq!(define("WG_BN"), TILE_ROWS);
        assert_eq!(define("WG_BK"), STAGE_COLS as usize);
        let stages = define("WG_STAGES");
        let stage = (TILE_TOKENS + TILE_ROWS) * STAGE_COLS as usize * 2;
        assert_eq!(SMEM_BYTES, stages * stage + (2 * stages + 2) * 8 + 1024);
        let (q_stages, block) = (define("WQ_STAGES"), define("WQ_BLOCK_BYTES"));
        assert_eq!(block, Q4K_BLOCK_BYTES as usize);
        let raw = 2 * TILE_ROWS * block;
        assert_eq!(
            Q4K_SMEM_BYTES,
            q_stages * stage + raw + (2 * q_stages + 2) * 8 + 1024
        );
    }
}
