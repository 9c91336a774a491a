//! `kernels/gemm_wgmma.cu`: long prefill ubatches on Hopper's warpgroup MMA in f16. The
//! quantized weight is expanded to f16 in a scratch buffer (`dequant_f16_<s>`), the f32
//! activations rounded to f16 (`round_f16`), and `gemm_wgmma_f16` multiplies the two with
//! tiles brought in by the bulk tensor copy (TMA) into a ring of shared-memory stages.
//! Whether a product takes it is the plan's (`Plan::f16_gemm`). Q4_K experts are instead
//! unpacked from their blocks inside the GEMM (`gemm_wgmma_q4k_experts`, `Plan::f16_unpack`),
//! with the same bits and no f16 copy of the weights. A batched decode step's 48-64 rows of
//! Q4_K products with long enough k shares take `gemm_wgmma_q4k_decode` (`matmul_decode`,
//! `Plan::f16_decode`): one token tile, so each weight is unpacked once, by two warpgroups in
//! f16 arithmetic, k split over blocks and the shares added in a fixed order.
//!
//! Contract: tensor-core, not the CPU's bits. Each product is of the weight as ferrolm-quant
//! dequantizes it and of the f32 activation, both rounded to f16 (2^-11 relative each), summed
//! in f32: within 1e-3 of `Σ|w·x|` of the exact product (`cuda-parity`'s `gemm f16` rows). The
//! CPU quantizes the activations to 8 bits instead, so against the CPU both differ from the
//! exact product, this one by less.

mod experts;

pub use experts::{ExpertBufs, ExpertRows};

use super::launch::Launcher;
use super::mmq::GemmFn;
use super::{int, kernel_suffix, stride_blocks, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::GEMM_WGMMA;
use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Tokens and weight rows of one block's tile (the kernel's WG_BM, WG_BN), and the columns a
/// stage brings in (WG_BK: one 128-byte swizzled row of f16).
const TILE_TOKENS: usize = 128;
const TILE_ROWS: usize = 256;
const STAGE_COLS: u32 = 64;
/// Dynamic shared memory of a kernel's ring (the kernel's `stages<>`): `stages` f16 stages of
/// `tokens` activation rows and the tile's rows of 64 columns, `slots` raw slots of a
/// `raw_row`-byte box of each of the tile's rows, a full and an empty barrier a stage and one a
/// slot, 1 KB to align the first stage to the swizzle's 1024 bytes.
const fn ring_smem(stages: usize, tokens: usize, slots: usize, raw_row: usize) -> usize {
    stages * (tokens + TILE_ROWS) * STAGE_COLS as usize * 2
        + slots * TILE_ROWS * raw_row
        + (2 * stages + slots) * 8
        + 1024
}
/// The kernel's WG_SMEM: four stages of 48 KB, their barriers and the two raw slots' (unused
/// here).
const SMEM_BYTES: usize = ring_smem(4, TILE_TOKENS, 2, 0);
/// Bytes of a Q4_K block (the kernel's WQ_BLOCK_BYTES): a raw box is one block of each of a
/// tile's rows.
const Q4K_BLOCK_BYTES: u32 = 144;
/// The kernel's WQ_SMEM: three f16 stages, two raw slots of a Q4_K block of each of the tile's
/// rows.
const Q4K_SMEM_BYTES: usize = ring_smem(3, TILE_TOKENS, 2, Q4K_BLOCK_BYTES as usize);
/// The deep decode variant's tokens a stage (the kernel's WD_TOKENS: a decode step's at most)
/// and its WD_SMEM: two f16 stages of them, four raw slots (225 KiB: within every Hopper
/// part's 227).
const DEEP_TOKENS: usize = 64;
const DEEP_SMEM_BYTES: usize = ring_smem(2, DEEP_TOKENS, 4, Q4K_BLOCK_BYTES as usize);
const _: () = assert!(
    DEEP_SMEM_BYTES <= 227 * 1024,
    "Hopper's opt-in shared memory"
);
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
    /// The batched decode variant: at most [`DECODE_MAX_TOKENS`] tokens, unpacked by two
    /// warpgroups in f16 arithmetic.
    q4k_decode: Option<GemmFn>,
    /// The same with three super-blocks of weights in flight, not one (`Plan::f16_decode_deep`).
    q4k_decode_deep: Option<GemmFn>,
    /// A zeroed counter per tile of a split `gemm_wgmma_q4k` (each launch's last share
    /// resets its tile's).
    done: CudaSlice<u32>,
}

impl GemmWgmma {
    /// Weight rows of a block's tile.
    pub const TILE_ROWS: usize = TILE_ROWS;

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
        let load_q4k = |name: &str, smem: usize| -> Result<Option<GemmFn>> {
            if hopper {
                GemmFn::load(dev, &GEMM_WGMMA, name, smem, THREADS).map(Some)
            } else {
                Ok(None)
            }
        };
        let q4k = load_q4k("gemm_wgmma_q4k", Q4K_SMEM_BYTES)?;
        let q4k_experts = load_q4k("gemm_wgmma_q4k_experts", Q4K_SMEM_BYTES)?;
        let q4k_decode = load_q4k("gemm_wgmma_q4k_decode", Q4K_SMEM_BYTES)?;
        let q4k_decode_deep = load_q4k("gemm_wgmma_q4k_decode_deep", DEEP_SMEM_BYTES)?;
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
            q4k_decode,
            q4k_decode_deep,
            done: dev.zeros(F16_SPLIT_TILES)?,
        })
    }

    /// Whether this device runs the GEMM at all (Hopper, and its shared memory fits).
    pub fn available(&self) -> bool {
        [
            &self.gemm,
            &self.experts,
            &self.q4k,
            &self.q4k_experts,
            &self.q4k_decode,
        ]
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

    /// Whether [`matmul_decode`](Self::matmul_decode) takes `ty` weights of `cols` columns:
    /// Q4_K of whole super-blocks. Not Q6_K: a copy box must start on a 16-byte boundary of its
    /// row, which 210-byte blocks do not keep (its decode form's copies were an illegal
    /// instruction on the H100 in session 44).
    pub fn decodes(ty: GgmlType, cols: usize) -> bool {
        Self::unpacks(ty) && cols.is_multiple_of(256)
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
        // SAFETY: the maps describe x16 (n × cols) and w16 (rows × cols), whose sizes are
        // asserted; out holds n × rows floats (asserted).
        unsafe {
            self.launch_tiles(
                f,
                "gemm_wgmma_f16",
                SMEM_BYTES,
                [x_map, w_map],
                n,
                rows,
                cols,
                out,
                false,
            )
        }
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
        assert!(w.ty == GgmlType::Q4K, "gemm q4k: {} weights", w.ty.name());
        assert!(x16.len() >= n * w.cols, "gemm q4k: x too small");
        assert!(out.len() >= n * w.rows, "gemm q4k: out too small");
        // The kernel stores pairs of columns.
        assert!(w.rows.is_multiple_of(2), "gemm q4k: {} rows", w.rows);
        if n == 0 {
            return Ok(());
        }
        let stream = self.launch.stream().clone();
        let (xp, _x_sync) = x16.device_ptr(&stream);
        let (wp, _w_sync) = w.data.device_ptr(&stream);
        let x_map = f16_map(xp, n, w.cols, TILE_TOKENS as u32)?;
        let w_map = raw_map(wp, w)?;
        // SAFETY: gemm_wgmma_q4k(x_map, w_map, out, n_tok, n_rows, k, part, done,
        // split_blocks), unsplit (grid z 1: part and done not read): the maps describe x16
        // (n × cols f16) and w's blocks (raw_map checks their size); out holds n × rows floats
        // (asserted).
        unsafe {
            self.launch_tiles(
                f,
                "gemm_wgmma_q4k",
                Q4K_SMEM_BYTES,
                [x_map, w_map],
                n,
                w.rows,
                w.cols,
                out,
                true,
            )
        }
    }

    /// A batched decode step's `outs[j] = x16 · ws[j]ᵀ` for `n` <= [`DECODE_MAX_TOKENS`]
    /// tokens and one or two Q4_K matrices of one shape ([`decodes`](Self::decodes)) (two: gate
    /// and up in one launch,
    /// `Plan::f16_decode_pair`) (`Plan::f16_decode`): one token tile, so each weight is read
    /// and unpacked once, by two warpgroups in f16 arithmetic (not the expanded path's bits:
    /// the f16 GEMM's tolerance). Split over k in `split`'s shares where that is more than
    /// one: each share's sum in `split.1` (at least [`Self::split_floats`] of the matrices'
    /// rows together), added in share order (the same bits every run; within f32 rounding of
    /// the unsplit sum). `deep`: the variant that keeps three super-blocks of weights in
    /// flight where this keeps one. Each output has the same bits whichever variant runs and
    /// whatever shares its launch.
    pub fn matmul_decode(
        &self,
        x16: &CudaSlice<u16>,
        n: usize,
        ws: &[&QuantMatrix],
        outs: &mut [&mut CudaSlice<f32>],
        split: Option<(usize, &mut CudaSlice<f32>)>,
        deep: bool,
    ) -> Result<()> {
        let Some(&w) = ws.first() else {
            return Ok(());
        };
        // The deep variant where it loaded (its 225 KiB of shared memory fit this part).
        let deep = deep && self.q4k_decode_deep.as_ref().is_some_and(|g| g.f.is_some());
        let (f, name, smem, box_tokens) = if deep {
            let f = hopper_only(&self.q4k_decode_deep)?;
            (
                f,
                "gemm_wgmma_q4k_decode_deep",
                DEEP_SMEM_BYTES,
                DEEP_TOKENS,
            )
        } else {
            let f = hopper_only(&self.q4k_decode)?;
            (f, "gemm_wgmma_q4k_decode", Q4K_SMEM_BYTES, TILE_TOKENS)
        };
        let one_shape = Self::decodes(w.ty, w.cols)
            && ws
                .iter()
                .all(|m| m.ty == w.ty && m.rows == w.rows && m.cols == w.cols);
        if !one_shape || ws.len() > DECODE_MAX_MATS || outs.len() != ws.len() {
            return Err(CudaError::Invalid(format!(
                "gemm decode: {} matrices ({} outputs) of one Q4_K shape, at most {DECODE_MAX_MATS}",
                ws.len(),
                outs.len()
            )));
        }
        let (rows, cols) = (w.rows, w.cols);
        assert!(n <= DECODE_MAX_TOKENS, "gemm decode: {n} tokens");
        // The kernel stores pairs of columns.
        assert!(rows.is_multiple_of(2), "gemm decode: {rows} rows");
        assert!(x16.len() >= n * cols, "gemm decode: x too small");
        assert!(
            outs.iter().all(|o| o.len() >= n * rows),
            "gemm decode: out too small"
        );
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let blocks = cols / 256;
        let per = blocks.div_ceil(split.as_ref().map_or(1, |s| s.0).clamp(1, blocks.max(1)));
        let shares = blocks.div_ceil(per);
        let tiles = rows.div_ceil(TILE_ROWS) * ws.len();
        let stream = self.launch.stream().clone();
        let part = match split {
            Some((_, scratch)) if shares > 1 => {
                assert!(
                    scratch.len() >= Self::split_floats(shares, n, rows * ws.len()),
                    "gemm decode: split scratch too small"
                );
                assert!(
                    tiles <= F16_SPLIT_TILES,
                    "gemm decode: split-K over {tiles} tiles (at most {F16_SPLIT_TILES})"
                );
                scratch.device_ptr_mut(&stream).0
            }
            // Unsplit, the kernel reads neither part nor done: the counters stand in.
            _ => self.done.device_ptr(&stream).0,
        };
        let (xp, _x_sync) = x16.device_ptr(&stream);
        let x_map = f16_map(xp, n, cols, box_tokens as u32)?;
        let mut maps = [x_map; DECODE_MAX_MATS];
        let mut dsts = [0u64; DECODE_MAX_MATS];
        for (j, (m, out)) in ws.iter().zip(outs.iter_mut()).enumerate() {
            maps[j] = raw_map(m.data.device_ptr(&stream).0, m)?;
            dsts[j] = out.device_ptr_mut(&stream).0;
        }
        // One matrix: its map and output stand in for the second's, which no tile reads.
        if ws.len() == 1 {
            (maps[1], dsts[1]) = (maps[0], dsts[0]);
        }
        let (ntok, nrows, k, per) = (
            int(n, "gemm tokens"),
            int(rows, "gemm rows"),
            int(cols, "gemm cols"),
            int(per, "gemm split blocks"),
        );
        let mut cfg = tiles_cfg(1, tiles, smem);
        cfg.grid_dim.2 = shares as u32;
        let mut b = self.launch.builder(f);
        b.arg(&x_map)
            .arg(&maps[0])
            .arg(&maps[1])
            .arg(&dsts[0])
            .arg(&dsts[1])
            .arg(&ntok)
            .arg(&nrows)
            .arg(&k)
            .arg(&part)
            .arg(&self.done)
            .arg(&per);
        // SAFETY: f(x_map, w_map0, w_map1, out0, out1, n_tok, n_rows, k, part, done,
        // split_blocks) (every decode kernel), grid (1, tiles of each matrix × matrices,
        // shares): the maps describe x16 (n <= 64 rows of cols f16, asserted; the deep
        // kernel's box of 64 tokens holds them all) and each matrix's blocks (raw_map
        // checks their size), each out holds n × rows floats (asserted); split, part holds shares
        // planes of them for each matrix and done a zeroed counter for each of the tiles
        // (asserted); no share is empty (shares = ceil(blocks / per)); the dynamic shared
        // memory the kernel's (allowed at load).
        unsafe { b.launch(cfg) }.during(format!("launching {name}"))?;
        Ok(())
    }

    /// The scratch floats of a split [`matmul_decode`](Self::matmul_decode): a plane of
    /// `n` × `rows` (the launch's matrices' rows together) for each of `shares`.
    pub fn split_floats(shares: usize, n: usize, rows: usize) -> usize {
        if shares > 1 {
            shares * n * rows
        } else {
            0
        }
    }

    /// Launches `f(x_map, w_map, out, n_tok, n_rows, k)` (gemm_wgmma_f16), or with `q4k_tail`
    /// `f(.., part, done, split_blocks)` unsplit (gemm_wgmma_q4k), over the tiles of `n`
    /// tokens × `rows` weight rows of `cols` columns.
    ///
    /// # Safety
    /// The maps describe x (`n` × `cols`) and the weight (`rows` × `cols`) in live device
    /// memory, and `out` holds `n` × `rows` floats: the copy engine fills boxes past the ends
    /// with zeros, and the kernel writes only t < n, r < rows.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_tiles(
        &self,
        f: &CudaFunction,
        name: &str,
        smem: usize,
        [x_map, w_map]: [TmaMapArg; 2],
        n: usize,
        rows: usize,
        cols: usize,
        out: &mut CudaSlice<f32>,
        q4k_tail: bool,
    ) -> Result<()> {
        let cfg = tiles_cfg(n.div_ceil(TILE_TOKENS), rows.div_ceil(TILE_ROWS), smem);
        let (ntok, nrows, k) = (
            int(n, "gemm tokens"),
            int(rows, "gemm rows"),
            int(cols, "gemm cols"),
        );
        let mut b = self.launch.builder(f);
        b.arg(&x_map)
            .arg(&w_map)
            .arg(out)
            .arg(&ntok)
            .arg(&nrows)
            .arg(&k);
        let per = int(cols / 256, "gemm split blocks");
        if q4k_tail {
            // Unsplit (grid z 1), the kernel touches neither pointer: the counters stand in
            // for the scratch.
            b.arg(&self.done).arg(&self.done).arg(&per);
        }
        // SAFETY: the caller's (above).
        unsafe { b.launch(cfg) }.during(format!("launching {name}"))?;
        Ok(())
    }
}

/// Tiles a split [`GemmWgmma::matmul_decode`] may have: its per-tile counters.
pub const F16_SPLIT_TILES: usize = 1024;

/// The most tokens of [`GemmWgmma::matmul_decode`]: one consumer warpgroup's.
pub const DECODE_MAX_TOKENS: usize = 64;

/// The most matrices of one [`GemmWgmma::matmul_decode`] launch (the kernel's two maps).
pub const DECODE_MAX_MATS: usize = 2;

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

/// A launch of the GEMM kernels over `token_tiles` × `row_tiles` blocks. Token tiles run
/// fastest: the blocks running at once share few weight tiles, which are then read from memory
/// about once.
fn tiles_cfg(token_tiles: usize, row_tiles: usize, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            int(token_tiles, "gemm token tiles") as u32,
            int(row_tiles, "gemm row tiles") as u32,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
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
    encode_tiled(
        addr,
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        [cols as u64, rows as u64],
        cols as u64 * 2,
        [STAGE_COLS, box_rows],
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    )
    .during(format!(
        "describing a {rows}×{cols} f16 matrix for the copy engine"
    ))
}

/// The tensor map of a Q4_K matrix's blocks at device address `addr`, as bytes `[rows][cols /
/// 256 · 144]`, read in boxes of one block × [`TILE_ROWS`] rows, unswizzled, a box stepping a
/// block along the row.
fn raw_map(addr: sys::CUdeviceptr, w: &QuantMatrix) -> Result<TmaMapArg> {
    let block = Q4K_BLOCK_BYTES;
    assert!(
        GemmWgmma::decodes(w.ty, w.cols),
        "raw map of {} {}×{}",
        w.ty.name(),
        w.rows,
        w.cols
    );
    let row_bytes = w.cols / 256 * block as usize;
    assert!(
        w.data.len() >= w.rows * row_bytes,
        "raw map: weight of another size"
    );
    encode_tiled(
        addr,
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        [row_bytes as u64, w.rows as u64],
        row_bytes as u64,
        [block, TILE_ROWS as u32],
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
    )
    .during(format!(
        "describing a {}×{} {} matrix for the copy engine",
        w.rows,
        w.cols,
        w.ty.name()
    ))
}

/// A 2-D tensor map (`dims` and `boxes` innermost first, rows `row_stride` bytes apart), boxes
/// past the ends filled with zeros.
fn encode_tiled(
    addr: sys::CUdeviceptr,
    ty: sys::CUtensorMapDataType,
    dims: [u64; 2],
    row_stride: u64,
    boxes: [u32; 2],
    swizzle: sys::CUtensorMapSwizzle,
) -> std::result::Result<TmaMapArg, cudarc::driver::DriverError> {
    let mut map = TmaMapArg { words: [0; 16] };
    let strides = [row_stride];
    let steps = [1u32, 1];
    // SAFETY: every pointer is to a live local of the length the rank (2) asks for; the
    // driver writes only the 128-byte map.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            (&mut map as *mut TmaMapArg).cast::<sys::CUtensorMap>(),
            ty,
            2,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
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
        assert_eq!(
            SMEM_BYTES,
            ring_smem(define("WG_STAGES"), TILE_TOKENS, 2, 0)
        );
        let (q_stages, block) = (define("WQ_STAGES"), define("WQ_BLOCK_BYTES"));
        assert_eq!(block, Q4K_BLOCK_BYTES as usize);
        assert_eq!(Q4K_SMEM_BYTES, ring_smem(q_stages, TILE_TOKENS, 2, block));
        let (d_stages, d_slots) = (define("WD_STAGES"), define("WD_SLOTS"));
        assert_eq!(define("WD_TOKENS"), DEEP_TOKENS);
        assert_eq!(
            DEEP_SMEM_BYTES,
            ring_smem(d_stages, DEEP_TOKENS, d_slots, block)
        );
    }
}
