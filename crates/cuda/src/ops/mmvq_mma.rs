//! `kernels/mmvq_mma.cu`: quantized weights times 2-64 Q8_1 activation rows on the tensor cores
//! (the steps of a batched decode). Each warp loads its weights straight into MMA fragments
//! and reuses them for every row, so the weights are read once a launch. Held to the
//! tensor-core contract (mmq's per-sub-block order; within f32 rounding of the CPU).

use super::int;
use super::launch::Launcher;
use super::QuantMatrix;
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MMVQ_MMA;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Activation rows one launch takes: eight MMA column tiles of 8 (the kernel's entries
/// `_t1`..`_t8`).
pub const MMA_MV_MAX_ROWS: usize = 64;
/// Warps per block (the kernel's MMA_MV_WARPS): they split a row's super-blocks.
const WARPS: u32 = 8;
/// Column tiles from which a two-row-tile entry (`_m2`) exists: below, the activation loads
/// are few enough that twice the warps (one tile each) pay more.
const TWO_TILES_FROM: usize = 5;
/// The kernel's `flags` bits (MMA_MV_Q8K_SCALES, MMA_MV_Y_ALIGNED8).
const FLAG_Q8K_SCALES: i32 = 1;
const FLAG_Y_ALIGNED8: i32 = 2;
/// Elements a K-quant super-block holds: the width must be whole super-blocks.
const SUPER_BLOCK: usize = 256;

pub struct MmvqMma {
    launch: Launcher,
    /// (type, row tiles a warp, column tiles) -> `mmvq_mma_<type>_m<MT>_t<NT>`.
    fns: HashMap<(GgmlType, usize, usize), CudaFunction>,
}

impl MmvqMma {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let mut fns = HashMap::new();
        for ty in super::formats::with(|f| f.matvec_mma) {
            let name = super::kernel_suffix(ty);
            for nt in 1..=MMA_MV_MAX_ROWS / 8 {
                for mt in [1, 2] {
                    if mt == 2 && nt < TWO_TILES_FROM {
                        continue;
                    }
                    let entry = format!("mmvq_mma_{name}_m{mt}_t{nt}");
                    fns.insert((ty, mt, nt), dev.function(&MMVQ_MMA, &entry)?);
                }
            }
        }
        Ok(Self {
            launch: launch.clone(),
            fns,
        })
    }

    /// Whether `ty` weights of `cols` columns have this kernel.
    pub fn supports(ty: GgmlType, cols: usize) -> bool {
        super::formats::has(ty, |f| f.matvec_mma) && cols.is_multiple_of(SUPER_BLOCK)
    }

    /// Whether `n` column tiles have a two-row-tile entry.
    pub fn has_two_tiles(n: usize) -> bool {
        n.div_ceil(8) >= TWO_TILES_FROM
    }

    /// `out[j][r] = W[r] · x[j]` for the `n` (1..=64) Q8_1 rows of `xq`; `out` holds
    /// `n * w.rows` floats. `two_tiles`: each warp takes 32 weight rows (16 otherwise), which
    /// halves the activation loads a weight ([`Self::has_two_tiles`] must hold). `q8k`: `xq`
    /// is Q8_K (one scale a super-block, in each of its blocks), read once a super-block (the
    /// same bits as reading each block's).
    pub fn matmul(
        &self,
        two_tiles: bool,
        q8k: bool,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (mt, nt) = (if two_tiles { 2 } else { 1 }, n.div_ceil(8));
        let f = self.fns.get(&(w.ty, mt, nt)).ok_or_else(|| {
            CudaError::Invalid(format!(
                "mmvq_mma: no kernel for {} weights, {n} rows, {mt} row tiles",
                w.ty
            ))
        })?;
        assert!(
            (1..=MMA_MV_MAX_ROWS).contains(&n),
            "mmvq_mma: {n} activation rows"
        );
        assert!(
            w.cols.is_multiple_of(SUPER_BLOCK),
            "mmvq_mma: {} columns",
            w.cols
        );
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(n, w.cols),
            "mmvq_mma: activations too small"
        );
        assert!(out.len() >= n * w.rows, "mmvq_mma: out too small");
        let cfg = LaunchConfig {
            grid_dim: (w.rows.div_ceil(16 * mt) as u32, 1, 1),
            block_dim: (32, WARPS, 1),
            shared_mem_bytes: 0,
        };
        let (cols, rows, rows_y) = (
            int(w.cols, "mmvq_mma cols"),
            int(w.rows, "mmvq_mma rows"),
            int(n, "mmvq_mma activation rows"),
        );
        let prefetch = self.launch.mode().prefetch_arg_for(w.data.len());
        let aligned8 = xq.device_ptr(self.launch.stream()).0 % 8 == 0;
        let flags = i32::from(q8k) * FLAG_Q8K_SCALES + i32::from(aligned8) * FLAG_Y_ALIGNED8;
        let mut b = self.launch.builder(f);
        b.arg(&w.data)
            .arg(xq)
            .arg(out)
            .arg(&cols)
            .arg(&rows)
            .arg(&rows_y)
            .arg(&prefetch)
            .arg(&flags);
        // SAFETY: mmvq_mma_*_m<MT>_t<NT>(vx, vy, dst, ncols, nrows, nrows_y, prefetch, flags):
        // rows x cols weights (cols whole super-blocks), n <= 8 NT Q8_1 rows of cols elements
        // (Q8_K's when flags says so), n x rows floats out; one block per 16 MT rows.
        unsafe { b.launch(cfg) }.during(format!("launching mmvq_mma for {}", w.ty))?;
        Ok(())
    }
}
