//! Activations on the device, lent from the backend's pools.

use super::pool::Pool;
use crate::ops::ActQuant;
use cudarc::driver::CudaSlice;
use std::sync::Arc;

/// Row-major activations on the device: `rows` of `width` floats, returned to the pools on
/// drop.
pub struct CudaAct {
    pub(super) buf: Option<CudaSlice<f32>>,
    /// The same values as activation blocks (and how they were quantized), when an op produced
    /// them alongside (a norm feeding matmuls); dropped by anything that writes `buf`.
    pub(super) q8: Option<(CudaSlice<u8>, ActQuant)>,
    pub rows: usize,
    pub width: usize,
    pub(super) pool: Arc<Pool<f32>>,
    pub(super) bytes: Arc<Pool<u8>>,
}

impl CudaAct {
    pub(super) fn buf(&self) -> &CudaSlice<f32> {
        self.buf.as_ref().expect("live activation")
    }

    /// For writing: the Q8_1 copy no longer matches and goes back to its pool.
    pub(super) fn buf_mut(&mut self) -> &mut CudaSlice<f32> {
        if let Some((q, _)) = self.q8.take() {
            self.bytes.give(q);
        }
        self.buf.as_mut().expect("live activation")
    }
}

impl Drop for CudaAct {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool.give(b);
        }
        if let Some((q, _)) = self.q8.take() {
            self.bytes.give(q);
        }
    }
}
