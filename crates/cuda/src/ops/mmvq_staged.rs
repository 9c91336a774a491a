//! `kernels/mmvq_staged.cu`: quantized weights times 17-64 Q8_1 activation rows on the tensor
//! cores (the larger steps of a batched decode), each super-block's activations staged in
//! shared memory once for a block's eight warps, the weights read once straight into MMA
//! fragments, k split over blocks where the row blocks alone leave SMs idle.
//!
//! Contract: mmq's arithmetic in the order the caller names ([`MmqOrder::Subs`], or
//! [`MmqOrder::Blocks`] for the integer-scale formats over Q8_K activations): one share gives
//! `mmq`'s bits for that order, several add their sums in share order (within f32 rounding of
//! one, as mmq's split-K), the same bits every run.

use super::launch::Launcher;
use super::{int, MmqOrder, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MMVQ_STAGED;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Activation rows one launch takes (the kernel's STG_MAX_COLS: eight column tiles of 8).
pub const STAGED_MAX_ROWS: usize = 64;
/// The fewest activation rows the kernel has an entry for (three column tiles: `_t3`).
pub const STAGED_MIN_ROWS: usize = 17;
/// Weight rows a block takes (the kernel's STG_ROWS: 8 warps of 16).
pub const STAGED_BLOCK_ROWS: usize = 128;
/// Row blocks a split launch may have: the kernel's per-block counters.
pub const STAGED_SPLIT_BLOCKS: usize = 1024;
const WARPS: u32 = 8;
/// The kernel's STG_SMEM: two stages of 64 activation rows of a super-block (304 bytes
/// apart, mmq_tile.cuh's MMQ_Y_STRIDE) and the current one's float2 scales per sub-block.
const SMEM_BYTES: u32 = 2 * 64 * 304 + 8 * 64 * 8;
/// Elements a super-block holds: the width must be whole super-blocks.
const SUPER_BLOCK: usize = 256;

pub struct MmvqStaged {
    launch: Launcher,
    /// (type, order, column tiles) -> `mmvq_staged_<type>_<order>_t<NT>`.
    fns: HashMap<(GgmlType, MmqOrder, usize), CudaFunction>,
    /// A zeroed counter per row block of a split launch; each block's last share resets it.
    done: CudaSlice<u32>,
}

impl MmvqStaged {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let mut fns = HashMap::new();
        for (order, order_name) in [(MmqOrder::Subs, "subs"), (MmqOrder::Blocks, "blocks")] {
            let types = super::formats::FORMATS
                .iter()
                .map(|f| f.ty)
                .filter(|&ty| Self::supports(ty, SUPER_BLOCK, order));
            for ty in types {
                let name = super::kernel_suffix(ty);
                for nt in STAGED_MIN_ROWS.div_ceil(8)..=STAGED_MAX_ROWS / 8 {
                    let entry = format!("mmvq_staged_{name}_{order_name}_t{nt}");
                    fns.insert((ty, order, nt), dev.function(&MMVQ_STAGED, &entry)?);
                }
            }
        }
        Ok(Self {
            launch: launch.clone(),
            fns,
            done: dev.zeros(STAGED_SPLIT_BLOCKS)?,
        })
    }

    /// Whether `ty` weights of `cols` columns have this kernel in `order`.
    pub fn supports(ty: GgmlType, cols: usize, order: MmqOrder) -> bool {
        let has = match order {
            MmqOrder::Subs => super::formats::has(ty, |f| f.matvec_mma),
            MmqOrder::Blocks => super::formats::has(ty, |f| f.gemm_blocks),
            MmqOrder::Pairs => false,
        };
        has && cols.is_multiple_of(SUPER_BLOCK)
    }

    /// Row blocks of a product of `rows` weight rows.
    pub fn row_blocks(rows: usize) -> usize {
        rows.div_ceil(STAGED_BLOCK_ROWS)
    }

    /// Floats of the scratch a product of `n` × `rows` outputs split `splits` ways needs.
    pub fn scratch(splits: usize, n: usize, rows: usize) -> usize {
        if splits > 1 {
            splits * n * rows
        } else {
            0
        }
    }

    /// `out[j][r] = W[r] · x[j]` for the `n` (17..=64) rows of `xq` (Q8_K where `order` is
    /// [`MmqOrder::Blocks`]), k shared out `splits` ways (`part`: [`Self::scratch`] floats
    /// where `splits` > 1); `out` holds `n * w.rows` floats.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        order: MmqOrder,
        splits: usize,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        n: usize,
        out: &mut CudaSlice<f32>,
        part: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        let nt = n.div_ceil(8);
        let f = self.fns.get(&(w.ty, order, nt)).ok_or_else(|| {
            CudaError::Invalid(format!(
                "mmvq_staged: no kernel for {} weights, {n} rows, {order:?} order",
                w.ty
            ))
        })?;
        assert!(
            w.cols.is_multiple_of(SUPER_BLOCK),
            "mmvq_staged: {} columns",
            w.cols
        );
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(n, w.cols),
            "mmvq_staged: activations too small"
        );
        assert!(out.len() >= n * w.rows, "mmvq_staged: out too small");
        let blocks = w.cols / SUPER_BLOCK;
        if blocks == 0 || w.rows == 0 || n == 0 {
            return Err(CudaError::Invalid(format!(
                "mmvq_staged: an empty product ({} × {} weights, {n} rows)",
                w.rows, w.cols
            )));
        }
        // Shares of ceil(blocks / splits) super-blocks, then as many as that takes (none
        // empty, never more than asked).
        let share = blocks.div_ceil(splits.clamp(1, blocks));
        let splits = blocks.div_ceil(share);
        let row_blocks = Self::row_blocks(w.rows);
        if splits > 1 && row_blocks > STAGED_SPLIT_BLOCKS {
            return Err(CudaError::Invalid(format!(
                "mmvq_staged: split-K over {row_blocks} row blocks (at most \
                 {STAGED_SPLIT_BLOCKS})"
            )));
        }
        let null = 0u64;
        let mut b = self.launch.builder(f);
        b.arg(&w.data).arg(xq).arg(out);
        let (cols, rows, rows_y, share_arg) = (
            int(w.cols, "mmvq_staged cols"),
            int(w.rows, "mmvq_staged rows"),
            int(n, "mmvq_staged activation rows"),
            int(share, "mmvq_staged share"),
        );
        b.arg(&cols).arg(&rows).arg(&rows_y);
        match part {
            Some(p) if splits > 1 => {
                assert!(
                    p.len() >= Self::scratch(splits, n, w.rows),
                    "mmvq_staged: split scratch too small"
                );
                b.arg(p).arg(&self.done);
            }
            _ if splits > 1 => {
                return Err(CudaError::Invalid(
                    "mmvq_staged: a split product without its scratch".into(),
                ))
            }
            _ => {
                b.arg(&null).arg(&null);
            }
        }
        let prefetch = self.launch.mode().prefetch_arg_for(w.data.len());
        b.arg(&share_arg).arg(&prefetch);
        let cfg = LaunchConfig {
            grid_dim: (row_blocks as u32, splits as u32, 1),
            block_dim: (32, WARPS, 1),
            shared_mem_bytes: SMEM_BYTES,
        };
        // SAFETY: mmvq_staged_<type>_<order>_t<NT>(vx, vy, dst, ncols, nrows, nrows_y, part,
        // done, share, prefetch): rows x cols weights (whole super-blocks), n <= 8 NT Q8_1
        // rows of cols elements (Q8_K's for the blocks order: the plan's), n x rows floats
        // out; split, part holds splits x n x rows floats and done a zeroed counter per row
        // block; STG_SMEM bytes of dynamic shared memory (under the 48 KiB needing no opt-in).
        unsafe { b.launch(cfg) }.during(format!("launching mmvq_staged for {}", w.ty))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's copies of the kernel's shape: warps, rows a block, activation rows, the
    /// entries' column tiles and the shared memory (two stages of mmq_tile.cuh's rows, then
    /// the scales).
    #[test]
    fn launcher_agrees_with_the_kernel() {
        let src = MMVQ_STAGED.source;
        assert!(src.contains(&format!("#define STG_WARPS {WARPS}")));
        assert!(src.contains("#define STG_ROWS (16 * STG_WARPS)"));
        assert_eq!(STAGED_BLOCK_ROWS, 16 * WARPS as usize);
        assert!(src.contains(&format!("#define STG_MAX_COLS {STAGED_MAX_ROWS}")));
        for nt in STAGED_MIN_ROWS.div_ceil(8)..=STAGED_MAX_ROWS / 8 {
            assert!(src.contains(&format!("STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, {nt})")));
        }
        assert!(!src.contains("STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 2)"));
        assert!(src.contains("#define STG_SMEM (STG_YSC + MMQ_SUBS * STG_MAX_COLS * 8)"));
        assert!(src.contains("#define STG_YSC (2 * STG_Y_BYTES)"));
        assert!(src.contains("#define STG_Y_BYTES (STG_MAX_COLS * MMQ_Y_STRIDE)"));
        let tile = crate::kernels::HEADERS
            .iter()
            .find(|h| h.name == "mmq_tile.cuh")
            .expect("mmq_tile.cuh");
        assert!(tile.source.contains("#define MMQ_Y_STRIDE 304"));
        assert_eq!(SMEM_BYTES, 2 * 64 * 304 + 8 * 64 * 8);
    }
}
