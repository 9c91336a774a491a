//! `kernels/mmq.cu`: quantized weight times many Q8_1 activation rows on the int8 tensor cores
//! (prefill), in three compiled tile shapes, and the CUDA-core kernels in the CPU's arithmetic.
//! Which kernel, tile and order a GEMM takes is the plan's ([`Gemm`], `crate::plan`).
//!
//! Contract: the same bits for every tile shape (each output adds its per-sub-block terms in
//! the same order with pinned f32 roundings, see `mmq_mma.cuh`). Against the CPU's matmul:
//! Q4_K with Q8_K activations is bit-identical in the CPU's integer-scale order
//! ([`MmqOrder::Pairs`] and [`MmqOrder::Blocks`]), and so are Q4_0, Q4_1, Q5_1, Q5_K and MXFP4; Q8_0
//! and Q5_0 are bit-identical on their eight-lane kernels (`mmq_q8_0_lanes`, `mmq_q5_0_lanes`,
//! CUDA cores; the tensor-core GEMM's f32 sums are in another order). Rows whose length is not a multiple of [`MMQ_BK`]
//! (SmolLM2-135M's 576) take the CUDA-core kernels (the formats with a `small_gemm`,
//! [`formats`](super::formats)), bit-identical too; for Q6_K the integer dots are exact and only
//! f32 scale products and sums round (`cuda-parity` checks all of them).

use super::launch::Launcher;
use super::{int, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::{KernelFile, MMQ};
use crate::plan::Gemm;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Columns of one k step (the kernel's MMQ_BK): weight columns must be a multiple of it.
pub const MMQ_BK: usize = 256;

/// One compiled tile shape: `bm` weight rows × `bn` tokens per block of `warps` warps (the
/// kernel's `MmqTile<name>` typedef; entry points `mmq_<format>_<name>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmqTile {
    pub name: &'static str,
    pub bm: usize,
    pub bn: usize,
    pub warps: u32,
}

/// Largest first (the plan's `auto_tile` prefers the front), then the 32-token tile for a
/// batched decode step's few rows.
pub const MMQ_TILES: [MmqTile; 4] = [
    MmqTile {
        name: "128x128",
        bm: 128,
        bn: 128,
        warps: 8,
    },
    MmqTile {
        name: "128x64",
        bm: 128,
        bn: 64,
        warps: 8,
    },
    MmqTile {
        name: "64x64",
        bm: 64,
        bn: 64,
        warps: 4,
    },
    MmqTile {
        name: "128x32",
        bm: 128,
        bn: 32,
        warps: 4,
    },
];

/// Tiles a split-K launch may have: the kernels' per-tile counters (`Mmq::done`).
pub const MMQ_SPLIT_TILES: usize = 4096;

/// The most split-K shares of one tile.
pub const MMQ_MAX_SPLITS: usize = 16;

/// The tile of the `mmq_<type>_blocks` entry points.
const BLOCKS_TILE: MmqTile = MMQ_TILES[2];

/// How a GEMM sums an output's terms (the kernels' MMQ_ORDER_*, mmq_mma.cuh).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmqOrder {
    /// One f32 step per 32-element sub-block: every format but the integer-scale ones.
    Subs = 0,
    /// Integer-scale formats: scaled dots summed in integers per pair of sub-blocks.
    Pairs = 1,
    /// Integer-scale formats: scaled dots summed in integers per 256-element block.
    Blocks = 2,
}

/// Bytes of dynamic shared memory of a GEMM block over `nmat` matrices of `ty` sharing one
/// activation tile: `MmqSmem<TYPE, C, NMAT>::bytes` of mmq_tile.cuh, computed the same way.
pub(super) fn smem_bytes(ty: GgmlType, bm: usize, bn: usize, nmat: usize) -> usize {
    const SUBS: usize = MMQ_BK / 32;
    const Y_STRIDE: usize = 304;
    const WQ_STRIDE: usize = 272;
    let raw = MMQ_BK / ty.block_elems() * ty.block_bytes();
    // MmqRaw::stride: unaligned rows (Q6_K, MXFP4) copied from the 16-byte boundary before
    // them (up to 16 - alignof(block) bytes: MXFP4's 17-byte blocks are byte-aligned, the
    // others 2-byte), padded to 16 bytes past a multiple of 128 (Q6_K) or to an odd multiple
    // of 16 (MXFP4).
    let raw_stride = if raw.is_multiple_of(16) {
        raw
    } else if ty == GgmlType::Mxfp4 {
        let around = (raw + 15).div_ceil(16) * 16;
        around + 16 * (1 - around / 16 % 2)
    } else {
        let around = (raw + 14).div_ceil(16) * 16;
        around + (144 - around % 128) % 128
    };
    let scale16 = ty == GgmlType::Q6K;
    let has_min = matches!(
        ty,
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K
    );
    let int_scales = ty == GgmlType::Q4K;
    // Per (row, sub-block) and per row (MmqRaw::scales, row_scales).
    let (scales, row_scales) = if int_scales {
        (3, 2)
    } else {
        (1 + scale16 as usize + has_min as usize, 0)
    };
    let stage = nmat * bm * raw_stride + bn * Y_STRIDE;
    2 * stage + bm * WQ_STRIDE + (scales * SUBS + row_scales) * bm * 4 + SUBS * bn * 8
}

/// A GEMM entry point allowed its dynamic shared memory: `None` where the device offers less
/// than it needs (the error says so at launch).
pub(super) struct GemmFn {
    pub f: Option<CudaFunction>,
    pub smem: usize,
    pub blocks_per_sm: u32,
}

impl GemmFn {
    pub fn load(
        dev: &CudaDevice,
        file: &'static KernelFile,
        name: &str,
        smem: usize,
        threads: u32,
    ) -> Result<Self> {
        let optin = dev
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .during("reading the shared memory limit")? as usize;
        if smem > optin {
            return Ok(Self {
                f: None,
                smem,
                blocks_per_sm: 0,
            });
        }
        let f = dev.function_with_smem(file, name, smem)?;
        let blocks_per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem, None)
            .during(format!("occupancy of {name}"))?;
        Ok(Self {
            f: Some(f),
            smem,
            blocks_per_sm,
        })
    }

    pub fn get(&self, what: &str) -> Result<&CudaFunction> {
        self.f.as_ref().ok_or_else(|| {
            CudaError::Invalid(format!(
                "{what} needs {} KiB of shared memory per block, more than this GPU offers",
                self.smem / 1024
            ))
        })
    }
}

pub struct Mmq {
    launch: Launcher,
    /// (type, index in MMQ_TILES) -> entry point `mmq_<type>_<tile>`.
    fns: HashMap<(GgmlType, usize), GemmFn>,
    /// Integer-scale formats: `mmq_<type>_blocks`, the [`MmqOrder::Blocks`] tail (64x64 tile).
    blocks: HashMap<GgmlType, GemmFn>,
    /// The CUDA-core kernels in the CPU's arithmetic (`small_gemm` of
    /// [`formats`](super::formats): `mmq_{q8_0,q5_0}_lanes`, `mmq_{q4_0,q4_1,q5_1}_chain`):
    /// rows of any multiple of 32, and short ubatches of the eight-lane formats.
    small: HashMap<GgmlType, CudaFunction>,
    /// Split-K launches' per-tile counters: zeroed once, each reset by its tile's last share.
    done: CudaSlice<u32>,
}

impl Mmq {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let mut fns = HashMap::new();
        for ty in super::formats::with(|f| f.gemm) {
            for (i, t) in MMQ_TILES.iter().enumerate() {
                let name = format!("mmq_{}_{}", super::kernel_suffix(ty), t.name);
                let smem = smem_bytes(ty, t.bm, t.bn, 1);
                fns.insert((ty, i), GemmFn::load(dev, &MMQ, &name, smem, 32 * t.warps)?);
            }
        }
        let mut blocks = HashMap::new();
        let t = BLOCKS_TILE;
        // The integer-scale formats (the plan's integer_scales).
        for ty in super::formats::with(|f| f.gemm_blocks) {
            let name = format!("mmq_{}_blocks", super::kernel_suffix(ty));
            let smem = smem_bytes(ty, t.bm, t.bn, 1);
            blocks.insert(ty, GemmFn::load(dev, &MMQ, &name, smem, 32 * t.warps)?);
        }
        let mut small = HashMap::new();
        for (ty, name) in super::formats::small_gemms() {
            small.insert(ty, dev.function(&MMQ, name)?);
        }
        Ok(Self {
            launch: launch.clone(),
            fns,
            blocks,
            small,
            done: dev.zeros(MMQ_SPLIT_TILES)?,
        })
    }

    /// Whether `ty` weights of `cols` columns have a GEMM: the tensor-core tiles
    /// ([`Mmq::tiles_take`]), or the CUDA-core kernels (`small_gemm` of
    /// [`formats`](super::formats)) for any multiple of 32.
    pub fn supports(ty: GgmlType, cols: usize) -> bool {
        let small = super::formats::has(ty, |f| f.small_gemm.is_some());
        super::formats::has(ty, |f| f.gemm)
            && (Self::tiles_take(ty, cols) || (small && cols.is_multiple_of(32)))
    }

    /// Whether the tensor-core tiles take rows of `cols` `ty` weights: whole k steps, or for
    /// the 32-element block formats any multiple of 32 whose rows (and Q8_1 activation rows)
    /// are 4-byte aligned, the last step partly zero (`mmq_tile.cuh`'s `mmq_k_steps`):
    /// gpt-oss's 2880.
    pub fn tiles_take(ty: GgmlType, cols: usize) -> bool {
        if cols.is_multiple_of(MMQ_BK) {
            return true;
        }
        let row_bytes = cols / 32 * ty.block_bytes();
        // Blocks of bytes not a multiple of 16 are staged through the aligned chunks around
        // them (MXFP4), at any alignment.
        let around = !(MMQ_BK / 32 * ty.block_bytes()).is_multiple_of(16);
        ty.block_elems() == 32 && cols.is_multiple_of(32) && (around || row_bytes.is_multiple_of(4))
    }

    /// k steps of rows of `cols` columns (the last one partial unless a multiple of
    /// [`MMQ_BK`]).
    pub fn k_steps(cols: usize) -> usize {
        cols.div_ceil(MMQ_BK)
    }

    /// Blocks of each tile shape one SM holds (occupancy at the shared memory each needs; 0:
    /// the tile does not fit this device), per format: what the plan's tile choice weighs.
    pub fn blocks_per_sm(&self) -> Vec<(GgmlType, [u32; MMQ_TILES.len()])> {
        super::formats::with(|f| f.gemm)
            .map(|ty| {
                let fits =
                    std::array::from_fn(|i| self.fns.get(&(ty, i)).map_or(0, |f| f.blocks_per_sm));
                (ty, fits)
            })
            .collect()
    }

    /// `out[t][r] = W[r] · x[t]` for the `n` Q8_1 rows of `xq` (`w.cols` elements each, from
    /// [`Quantize::q8_1`](super::Quantize::q8_1)), as `how` says (the plan's
    /// [`gemm`](crate::plan::Plan::gemm)); `out` holds `n * w.rows` floats. Every tile gives
    /// the same bits. A split-K `how` needs `scratch` of [`Gemm::scratch`] floats.
    pub fn matmul(
        &self,
        how: &Gemm,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        n: usize,
        out: &mut CudaSlice<f32>,
        scratch: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        if !Self::supports(w.ty, w.cols) {
            return Err(CudaError::Invalid(format!(
                "mmq: {} rows of {} columns (a multiple of {MMQ_BK}, or of 32 for {:?})",
                w.ty,
                w.cols,
                super::formats::small_gemms()
                    .map(|f| f.0)
                    .collect::<Vec<_>>()
            )));
        }
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(n, w.cols),
            "mmq: activations too small"
        );
        assert!(out.len() >= n * w.rows, "mmq: out too small");
        let (tile, launches, splits) = match how {
            Gemm::Small => {
                if n == 0 || w.rows == 0 {
                    return Ok(());
                }
                return self.matmul_small(w, xq, n, out);
            }
            Gemm::Tiles {
                tile,
                launches,
                splits,
            } => (*tile, launches, *splits),
        };
        if !Self::tiles_take(w.ty, w.cols) {
            return Err(CudaError::Invalid(format!(
                "mmq: {} rows of {} columns take the CUDA-core kernel, not tiles",
                w.ty, w.cols
            )));
        }
        let t = MMQ_TILES
            .get(tile)
            .ok_or_else(|| CudaError::Invalid(format!("mmq: no tile {tile}")))?;
        let g = self
            .fns
            .get(&(w.ty, tile))
            .ok_or_else(|| CudaError::Invalid(format!("mmq: no kernel for {} weights", w.ty)))?;
        let f = g.get(&format!("mmq {} tile {}", w.ty, t.name))?;
        assert_eq!(
            launches.iter().map(|l| l.1).sum::<usize>(),
            n,
            "mmq: launches for another token count"
        );
        if n == 0 || w.rows == 0 {
            return Ok(());
        }
        let row_q8 = super::Quantize::q8_1_bytes(1, w.cols);
        let steps = Self::k_steps(w.cols);
        // Shares of at least one step each; a count past the steps would leave some empty.
        let splits = splits.clamp(1, steps.min(MMQ_MAX_SPLITS));
        let split_steps = steps.div_ceil(splits);
        let splits = steps.div_ceil(split_steps);
        let need = splits * n * w.rows;
        let mut part = match scratch {
            _ if splits == 1 => None,
            Some(s) if s.len() >= need => Some(s),
            _ => {
                return Err(CudaError::Invalid(format!(
                    "mmq: split-K in {splits} needs {need} floats of scratch"
                )))
            }
        };
        for &(tok0, ntok, order) in launches {
            let (f, t, g) = if order == MmqOrder::Blocks {
                let g = self.blocks.get(&w.ty).ok_or_else(|| {
                    CudaError::Invalid(format!("mmq: no block-order kernel for {}", w.ty))
                })?;
                (g.get(&format!("mmq {} blocks", w.ty))?, &BLOCKS_TILE, g)
            } else {
                (f, t, g)
            };
            // Split only the per-sub-block order (the CPU-order launches keep their bits).
            let z = if order == MmqOrder::Subs { splits } else { 1 };
            let tiles = w.rows.div_ceil(t.bm) * ntok.div_ceil(t.bn);
            if z > 1 && tiles > MMQ_SPLIT_TILES {
                return Err(CudaError::Invalid(format!(
                    "mmq: split-K over {tiles} tiles (at most {MMQ_SPLIT_TILES})"
                )));
            }
            let cfg = LaunchConfig {
                grid_dim: (
                    int(w.rows.div_ceil(t.bm), "mmq row tiles") as u32,
                    int(ntok.div_ceil(t.bn), "mmq token tiles") as u32,
                    z as u32,
                ),
                block_dim: (32, t.warps, 1),
                shared_mem_bytes: g.smem as u32,
            };
            let xs = xq.slice(tok0 * row_q8..(tok0 + ntok) * row_q8);
            let mut os = out.slice_mut(tok0 * w.rows..(tok0 + ntok) * w.rows);
            let blocks = order == MmqOrder::Blocks;
            let (cols, rows, ntok, order) = (
                int(w.cols, "mmq cols"),
                int(w.rows, "mmq rows"),
                int(ntok, "mmq tokens"),
                order as i32,
            );
            let split_steps = int(split_steps, "mmq split steps");
            let mut b = self.launch.builder(f);
            b.arg(&w.data)
                .arg(&xs)
                .arg(&mut os)
                .arg(&cols)
                .arg(&rows)
                .arg(&ntok)
                .arg(&order);
            if !blocks {
                // The blocks entry takes no split arguments. Unsplit, the kernel touches
                // neither pointer: the counters stand in for the scratch.
                match part.as_deref_mut() {
                    Some(p) if z > 1 => b.arg(p),
                    _ => b.arg(&self.done),
                };
                b.arg(&self.done).arg(&split_steps);
            }
            // SAFETY: mmq_<type>_<tile>(vx, vy, dst, ncols, nrows, ntok, order, part, done,
            // split_steps): rows x cols weights, ntok Q8_1 rows of cols elements, ntok x rows
            // floats out (the views); cols % 256 == 0 checked above, grid covers every (row,
            // token) tile and z shares of split_steps k steps, scratch of z × ntok × rows
            // floats (checked above; ntok <= n), a counter per tile (tiles checked above),
            // shared memory as the kernel lays it out.
            unsafe { b.launch(cfg) }.during(format!("launching mmq for {} ({})", w.ty, t.name))?;
        }
        Ok(())
    }

    /// `ty` weights on their CUDA-core kernel (the CPU's order; shapes checked by the caller).
    fn matmul_small(
        &self,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        const T: usize = 16; // the kernel's LANES_T
        let cfg = LaunchConfig {
            grid_dim: (
                int(w.rows.div_ceil(4 * T), "mmq row tiles") as u32,
                int(n.div_ceil(2 * T), "mmq token tiles") as u32,
                1,
            ),
            block_dim: (T as u32, T as u32, 1),
            shared_mem_bytes: 0,
        };
        let (cols, rows, ntok) = (
            int(w.cols, "mmq cols"),
            int(w.rows, "mmq rows"),
            int(n, "mmq tokens"),
        );
        let f = self.small.get(&w.ty).ok_or_else(|| {
            CudaError::Invalid(format!("mmq: no CUDA-core kernel for {} weights", w.ty))
        })?;
        let mut b = self.launch.builder(f);
        b.arg(&w.data)
            .arg(xq)
            .arg(out)
            .arg(&cols)
            .arg(&rows)
            .arg(&ntok);
        // SAFETY: mmq_<type>_{lanes,chain}(vx, vy, dst, ncols, nrows, ntok): rows x cols
        // weights, n activation rows of cols (a multiple of 32), n x rows floats out (sizes
        // asserted by matmul); the grid covers every (row, token) tile.
        unsafe { b.launch(cfg) }.during(format!("launching the {} CUDA-core GEMM", w.ty))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_lanes_launch_matches_the_kernel() {
        let src = MMQ.source;
        assert!(src.contains("#define LANES_T 16"));
        assert!(src.contains("#define LANES_RM 4"));
        assert!(src.contains("#define LANES_RN 2"));
    }

    /// Rows of a multiple of 256 for every format; of 32 only where a CUDA-core kernel exists
    /// (SmolLM2-135M's 576-wide rows are Q4_1 and Q8_0; Qwen2.5-0.5B's 896 have Q5_0).
    #[test]
    fn shapes_with_a_gemm() {
        assert!(Mmq::supports(GgmlType::Q4K, 4096));
        assert!(Mmq::supports(GgmlType::Q6K, 1536));
        assert!(!Mmq::supports(GgmlType::Q4K, 576));
        assert!(!Mmq::supports(GgmlType::Q5K, 576));
        assert!(Mmq::supports(GgmlType::Q4_1, 576));
        assert!(Mmq::supports(GgmlType::Q4_0, 96));
        assert!(Mmq::supports(GgmlType::Q8_0, 576));
        // Qwen2.5-0.5B's 896-wide rows, and the shape-space goldens' Q5_0/Q5_1 fallbacks.
        assert!(Mmq::supports(GgmlType::Q5_0, 896));
        assert!(Mmq::supports(GgmlType::Q5_1, 96));
        assert!(!Mmq::supports(GgmlType::Q8_0, 48));
        // gpt-oss's 2880-wide rows (MXFP4 experts) on the CUDA-core chain; 4096 on the tiles.
        assert!(Mmq::supports(GgmlType::Mxfp4, 2880));
        assert!(Mmq::supports(GgmlType::Mxfp4, 4096));
        assert!(!Mmq::supports(GgmlType::F16, 4096));
    }

    /// The layout sums of mmq_tile.cuh worked by hand for two shapes.
    #[test]
    fn shared_memory_matches_the_kernel_layout() {
        // Q8_0 128×128: stages 2 × (128·272 + 128·304), codes 128·272, d 8·128·4, y 8·128·8.
        assert_eq!(
            smem_bytes(GgmlType::Q8_0, 128, 128, 1),
            2 * (128 * 272 + 128 * 304) + 128 * 272 + 8 * 128 * 4 + 8 * 128 * 8
        );
        // Q6_K rows of 210 bytes copy 224 (2-byte aligned starts) into rows of 272 (16 past a
        // multiple of 128); d, d_hi per sub-block.
        assert_eq!(
            smem_bytes(GgmlType::Q6K, 64, 64, 2),
            2 * (2 * 64 * 272 + 64 * 304) + 64 * 272 + 2 * 8 * 64 * 4 + 8 * 64 * 8
        );
        // Q4_K (integer scales): sc as f32 and as int, m per sub-block; d, dmin per row.
        assert_eq!(
            smem_bytes(GgmlType::Q4K, 128, 128, 1),
            2 * (128 * 144 + 128 * 304) + 128 * 272 + (3 * 8 + 2) * 128 * 4 + 8 * 128 * 8
        );
        // MXFP4: 8 blocks of 17 bytes (136) copy 160 (byte-aligned starts: up to 15 bytes
        // before) into rows of 176 (an odd multiple of 16); d per sub-block. The grouped
        // gate/up tile (64 × 64, two matrices) then takes 105 KB: two blocks an SM.
        assert_eq!(
            smem_bytes(GgmlType::Mxfp4, 128, 64, 1),
            2 * (128 * 176 + 64 * 304) + 128 * 272 + 8 * 128 * 4 + 8 * 64 * 8
        );
        assert_eq!(smem_bytes(GgmlType::Mxfp4, 64, 64, 2), 107_520);
        // Q5_1: 8 blocks of 24 bytes a k step; d and m per sub-block.
        assert_eq!(
            smem_bytes(GgmlType::Q5_1, 128, 128, 1),
            2 * (128 * 192 + 128 * 304) + 128 * 272 + 2 * 8 * 128 * 4 + 8 * 128 * 8
        );
        // Every dense shape fits the H100/H200's 227 KiB.
        for ty in crate::ops::formats::with(|f| f.gemm) {
            for t in MMQ_TILES {
                assert!(
                    smem_bytes(ty, t.bm, t.bn, 1) <= 227 * 1024,
                    "{ty} {}",
                    t.name
                );
            }
        }
    }
}
