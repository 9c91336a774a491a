//! Device buffers reused across forward passes.
//!
//! A forward pass allocates and drops its activations in the same order every time it runs
//! with the same shapes, so a free list per exact length hands out the same buffers again.
//! That is what makes a decode step capturable once as a CUDA graph: the pointers it captured
//! stay valid (the pool never frees while it lives), and no allocation happens during capture.

use crate::error::{CudaError, DriverContext, Result};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct Pool<T> {
    stream: Arc<CudaStream>,
    free: Mutex<HashMap<usize, Vec<CudaSlice<T>>>>,
    /// Set while a graph is being captured: a miss then is an error instead of an allocation
    /// (an allocation inside a capture would belong to the graph, not to the pool).
    capturing: Mutex<bool>,
}

impl<T: DeviceRepr + ValidAsZeroBits> Pool<T> {
    pub fn new(stream: Arc<CudaStream>) -> Self {
        Self {
            stream,
            free: Mutex::new(HashMap::new()),
            capturing: Mutex::new(false),
        }
    }

    /// A buffer of exactly `len` elements, with unspecified contents.
    pub fn take(&self, len: usize) -> Result<CudaSlice<T>> {
        if let Some(buf) = self.lock().get_mut(&len.max(1)).and_then(Vec::pop) {
            return Ok(buf);
        }
        if *self.capturing.lock().expect("pool flag poisoned") {
            return Err(CudaError::Invalid(format!(
                "a buffer of {len} elements was needed during graph capture"
            )));
        }
        // Zeroed once, so a fresh buffer never holds another run's bits. Empty activations
        // (no logit rows wanted) still get one element: the driver refuses zero-byte buffers,
        // and ops skip empty activations before looking at their buffers.
        self.stream.alloc_zeros(len.max(1)).during(format!(
            "allocating {} bytes of activations",
            len * size_of::<T>()
        ))
    }

    /// `f` with a scratch of `len` elements from the pool, given back after it (`None`, and
    /// nothing taken, where `len` is 0: a split product's shares that need no scratch).
    pub fn with_scratch<R>(
        &self,
        len: usize,
        f: impl FnOnce(Option<&mut CudaSlice<T>>) -> Result<R>,
    ) -> Result<R> {
        if len == 0 {
            return f(None);
        }
        let mut buf = self.take(len)?;
        let done = f(Some(&mut buf));
        self.give(buf);
        done
    }

    pub fn give(&self, buf: CudaSlice<T>) {
        self.lock().entry(buf.len()).or_default().push(buf);
    }

    pub fn set_capturing(&self, on: bool) {
        *self.capturing.lock().expect("pool flag poisoned") = on;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Vec<CudaSlice<T>>>> {
        self.free.lock().expect("pool poisoned")
    }
}
