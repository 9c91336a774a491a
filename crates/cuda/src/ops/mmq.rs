//! `kernels/mmq.cu`: quantized weight times many Q8_1 activation rows on the int8 tensor cores
//! (prefill).

use super::{int, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MMQ;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;
use std::sync::Arc;

/// Warps per block (the kernel's MMQ_NWARPS); each takes 16 weight rows.
pub(super) const NWARPS: u32 = 4;
/// Weight rows, tokens and columns of one block's tile (MMQ_BM, MMQ_BN, MMQ_BK).
pub(super) const BM: usize = 16 * NWARPS as usize;
pub(super) const BN: usize = 64;
pub const MMQ_BK: usize = 256;

/// Weight formats with an mmq instance (entry points `mmq_<suffix>`).
pub(super) const FORMATS: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

pub struct Mmq {
    stream: Arc<CudaStream>,
    /// type -> entry point `mmq_<type>`.
    fns: HashMap<GgmlType, CudaFunction>,
}

impl Mmq {
    pub fn load(dev: &CudaDevice) -> Result<Self> {
        let mut fns = HashMap::new();
        for &ty in FORMATS {
            let name = super::kernel_suffix(ty);
            fns.insert(ty, dev.function(&MMQ, &format!("mmq_{name}"))?);
        }
        Ok(Self {
            stream: dev.stream().clone(),
            fns,
        })
    }

    /// Whether `ty` has a kernel; `cols` must also be a multiple of [`MMQ_BK`].
    pub fn supports(ty: GgmlType) -> bool {
        FORMATS.contains(&ty)
    }

    /// `out[t][r] = W[r] · x[t]` for the `n` Q8_1 rows of `xq` (`w.cols` elements each, from
    /// [`Quantize::q8_1`](super::Quantize::q8_1)); `out` holds `n * w.rows` floats.
    pub fn matmul(
        &self,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = self
            .fns
            .get(&w.ty)
            .ok_or_else(|| CudaError::Invalid(format!("mmq: no kernel for {} weights", w.ty)))?;
        if !w.cols.is_multiple_of(MMQ_BK) {
            return Err(CudaError::Invalid(format!(
                "mmq: {} columns is not a multiple of {MMQ_BK}",
                w.cols
            )));
        }
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(n, w.cols),
            "mmq: activations too small"
        );
        assert!(out.len() >= n * w.rows, "mmq: out too small");
        if n == 0 || w.rows == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (
                int(w.rows.div_ceil(BM), "mmq row tiles") as u32,
                int(n.div_ceil(BN), "mmq token tiles") as u32,
                1,
            ),
            block_dim: (32, NWARPS, 1),
            shared_mem_bytes: 0,
        };
        let (cols, rows, ntok) = (
            int(w.cols, "mmq cols"),
            int(w.rows, "mmq rows"),
            int(n, "mmq tokens"),
        );
        let mut b = self.stream.launch_builder(f);
        b.arg(&w.data)
            .arg(xq)
            .arg(out)
            .arg(&cols)
            .arg(&rows)
            .arg(&ntok);
        // SAFETY: mmq_<type>(vx, vy, dst, ncols, nrows, ntok): rows x cols weights, ntok Q8_1
        // rows of cols elements, ntok x rows floats out; cols % 256 == 0 checked above, grid
        // covers every (row, token) tile.
        unsafe { b.launch(cfg) }.during(format!("launching mmq for {}", w.ty))?;
        Ok(())
    }
}
