//! The routed experts of any number of tokens through the decode kernels ([`MoeDecode`]), in
//! slices of [`MOE_DECODE_MAX_TOKENS`]: the path for int8 experts whose widths the grouped GEMM
//! does not take (`n_embd` or `n_ff` not a multiple of 256, as in the shape-space goldens' MoE
//! files with `n_ff` 64 and 96). Each slice's activations, routes and output rows are copied
//! into [`MoeSliceWork`] and back (the decode kernels take whole buffers), so every token gets
//! exactly the bits a decode step of its slice would: the decode kernels' contract.

use super::moe_decode::{MoeDecode, MoeDecodeWork, MOE_DECODE_MAX_TOKENS};
use super::{MoeExperts, Quantize};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::plan::ExpertMatVec;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::ops::Range;
use std::sync::Arc;

/// One slice's inputs and output, for one expert shape (`n_used`, `n_embd`), allocated once.
pub struct MoeSliceWork {
    xq: CudaSlice<u8>,
    ids: CudaSlice<i32>,
    weights: CudaSlice<f32>,
    out: CudaSlice<f32>,
    pub n_used: usize,
    pub n_embd: usize,
}

impl MoeSliceWork {
    pub fn new(dev: &CudaDevice, experts: &MoeExperts) -> Result<Self> {
        let (k, d, n) = (experts.n_used, experts.n_embd(), MOE_DECODE_MAX_TOKENS);
        Ok(Self {
            xq: dev.zeros(Quantize::q8_1_bytes(n, d))?,
            ids: dev.zeros(n * k)?,
            weights: dev.zeros(n * k)?,
            out: dev.zeros(n * d)?,
            n_used: k,
            n_embd: d,
        })
    }
}

impl MoeDecode {
    /// [`MoeDecode::forward`] for any `n`: adds the experts' output for the `n` activation rows
    /// of `x_q8_1` to `residual`, [`MOE_DECODE_MAX_TOKENS`] tokens a call (`work` sized for
    /// that many).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_slices(
        &self,
        how: &ExpertMatVec,
        x_q8_1: &CudaSlice<u8>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeDecodeWork,
        slices: &mut MoeSliceWork,
        residual: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (k, d) = (experts.n_used, experts.n_embd());
        assert!(
            (slices.n_used, slices.n_embd) == (k, d),
            "moe slices: work for another expert shape"
        );
        assert!(
            x_q8_1.len() >= Quantize::q8_1_bytes(n, d)
                && ids.len() >= n * k
                && weights.len() >= n * k
                && residual.len() >= n * d,
            "moe slices: inputs for fewer than {n} tokens"
        );
        let row_q8 = Quantize::q8_1_bytes(1, d);
        let stream = self.stream();
        for t0 in (0..n).step_by(MOE_DECODE_MAX_TOKENS) {
            let m = (n - t0).min(MOE_DECODE_MAX_TOKENS);
            let rows = t0..t0 + m;
            copy_rows(stream, x_q8_1, rows.clone(), row_q8, &mut slices.xq, 0..m)?;
            copy_rows(stream, ids, rows.clone(), k, &mut slices.ids, 0..m)?;
            copy_rows(stream, weights, rows.clone(), k, &mut slices.weights, 0..m)?;
            copy_rows(stream, residual, rows.clone(), d, &mut slices.out, 0..m)?;
            self.forward(
                how,
                &slices.xq,
                m,
                &slices.ids,
                &slices.weights,
                experts,
                work,
                &mut slices.out,
            )?;
            copy_rows(stream, &slices.out, 0..m, d, residual, rows)?;
        }
        Ok(())
    }
}

/// Rows `from` of `src` into rows `to` of `dst` (as many), rows of `width` elements.
fn copy_rows<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: &CudaSlice<T>,
    from: Range<usize>,
    width: usize,
    dst: &mut CudaSlice<T>,
    to: Range<usize>,
) -> Result<()> {
    stream
        .memcpy_dtod(
            &src.slice(from.start * width..from.end * width),
            &mut dst.slice_mut(to.start * width..to.end * width),
        )
        .during("copying an MoE slice")?;
    Ok(())
}
