//! A pass's logits in host memory, filled by one copy from the device.
//!
//! Page-locked memory, allocated once and reused, takes the copy at the link's rate; pageable
//! memory goes through the driver's staging buffers (a 64-sequence qwen3-8b step's 39 MB took
//! 4.0 ms that way on the H200, a sixth of the step: docs/perf.md, issue 16). The page-locked
//! memory is cacheable, not write-combined (cudarc's `alloc_pinned` default): the sampler
//! reads every logit, and reads of write-combined memory bypass the CPU's caches.

use crate::error::{DriverContext, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, PinnedHostSlice};
use std::ops::Deref;
use std::sync::Arc;

/// Logits `[rows][n_vocab]` on the host; derefs to the filled part.
pub struct HostLogits {
    mem: Mem,
    /// Floats filled by the last copy.
    len: usize,
}

enum Mem {
    Pageable(Vec<f32>),
    Locked {
        buf: PinnedHostSlice<f32>,
        /// `buf`'s memory, taken once (cudarc hands it out behind an event wait).
        ptr: *mut f32,
    },
}

// SAFETY: `ptr` points into `buf` (Send and Sync), which this value owns and frees last; the
// memory is written only by `fill`'s copy, which `fill` waits for before returning.
unsafe impl Send for HostLogits {}
unsafe impl Sync for HostLogits {}

impl Default for HostLogits {
    fn default() -> Self {
        Self {
            mem: Mem::Pageable(Vec::new()),
            len: 0,
        }
    }
}

impl Deref for HostLogits {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match &self.mem {
            Mem::Pageable(v) => &v[..self.len],
            // SAFETY: `len` floats of `buf`, written by a copy that has completed.
            Mem::Locked { ptr, .. } => unsafe { std::slice::from_raw_parts(*ptr, self.len) },
        }
    }
}

impl HostLogits {
    /// Floats this buffer holds without growing.
    pub fn capacity(&self) -> usize {
        match &self.mem {
            Mem::Pageable(v) => v.capacity(),
            Mem::Locked { buf, .. } => buf.len(),
        }
    }

    pub fn is_locked(&self) -> bool {
        matches!(self.mem, Mem::Locked { .. })
    }

    /// The first `n` floats of `src` (fewer where it is shorter), waited for. `locked` asks
    /// for page-locked memory: a pageable or too small buffer is replaced by a page-locked
    /// one of `n` floats; where the driver cannot give one, the copy stays pageable (slower,
    /// the same bytes).
    pub fn fill(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<f32>,
        n: usize,
        locked: bool,
    ) -> Result<()> {
        let n = n.min(src.len());
        self.len = 0;
        if locked && (!self.is_locked() || self.capacity() < n) {
            if let Some(mem) = lock(ctx, n) {
                self.mem = mem;
            }
        }
        if !locked && self.is_locked() {
            self.mem = Mem::Pageable(Vec::new());
        }
        let from = src.slice(..n);
        match &mut self.mem {
            Mem::Pageable(v) => {
                // Shrinking keeps the capacity; growing writes only the new part.
                v.resize(n, 0.0);
                stream
                    .memcpy_dtoh(&from, v.as_mut_slice())
                    .during("copying logits from the device")?;
            }
            Mem::Locked { ptr, .. } => {
                // SAFETY: the buffer holds at least `n` floats (checked above), and nothing
                // reads them until the copy has been waited for below.
                let dst = unsafe { std::slice::from_raw_parts_mut(*ptr, n) };
                // Asynchronous into page-locked memory: the wait makes it a step's end.
                stream
                    .memcpy_dtoh(&from, dst)
                    .during("copying logits from the device")?;
                stream.synchronize().during("waiting for the logits copy")?;
            }
        }
        self.len = n;
        Ok(())
    }

    /// The logits as a vector of their own.
    pub fn into_vec(self) -> Vec<f32> {
        match self.mem {
            Mem::Pageable(mut v) => {
                v.truncate(self.len);
                v
            }
            Mem::Locked { .. } => self.to_vec(),
        }
    }
}

/// Page-locked, cacheable memory for `n` floats; `None` where the driver refuses it.
fn lock(ctx: &Arc<CudaContext>, n: usize) -> Option<Mem> {
    // SAFETY: the memory is uninitialised; `fill` writes every float it exposes first.
    let mut buf = unsafe { ctx.alloc_pinned_with_flags::<f32>(n.max(1), 0) }.ok()?;
    let ptr = buf.as_mut_ptr().ok()?;
    Some(Mem::Locked { buf, ptr })
}
