//! A pass's logits in host memory, filled by one copy from the device.
//!
//! Page-locked memory, allocated once and reused, takes the copy at the link's rate; pageable
//! memory goes through the driver's staging buffers (a 64-sequence qwen3-8b step's 39 MB took
//! 4.0 ms that way on the H200, a sixth of the step: docs/perf.md, issue 16). The page-locked
//! memory is cacheable, not write-combined (cudarc's `alloc_pinned` default): the sampler
//! reads every logit, and reads of write-combined memory bypass the CPU's caches. Callers give
//! buffers back when done ([`HostLogitsPool`]), so pinning happens once, not every step.

use crate::error::{DriverContext, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, PinnedHostSlice};
use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// The most floats a page-locked buffer holds (256 MiB): a pass with more logits rows (a
/// long prompt's every row) copies them to pageable memory rather than pin that much.
pub const LOCKED_MAX_FLOATS: usize = 64 << 20;

/// The most buffers [`HostLogitsPool`] keeps.
const POOL_MAX: usize = 64;

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

    /// The first `rows × width` floats of `src` (fewer where it is shorter), waited for.
    /// `locked` asks for page-locked memory: a pageable or too small buffer is replaced by a
    /// page-locked one, rounded up to a power of two of rows (a batch that grows a sequence
    /// at a time reallocates a few times, not every step); where the driver cannot give one,
    /// or past [`LOCKED_MAX_FLOATS`], the copy goes to pageable memory (slower, the same bytes).
    pub fn fill(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<f32>,
        (rows, width): (usize, usize),
        locked: bool,
    ) -> Result<()> {
        let n = (rows * width).min(src.len());
        self.len = 0;
        let want_locked = locked && n <= LOCKED_MAX_FLOATS;
        if want_locked && n > 0 && (!self.is_locked() || self.capacity() < n) {
            let rounded = (rows.next_power_of_two() * width).min(LOCKED_MAX_FLOATS);
            self.mem = lock(ctx, rounded.max(n)).unwrap_or(Mem::Pageable(Vec::new()));
        }
        if !want_locked && self.is_locked() {
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
            Mem::Locked { buf, ptr } => {
                assert!(buf.len() >= n, "page-locked logits buffer too small");
                // SAFETY: the buffer holds at least `n` floats (asserted), and nothing reads
                // them until the copy has been waited for below.
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
}

/// Page-locked, cacheable memory for `n` floats; `None` where the driver refuses it.
fn lock(ctx: &Arc<CudaContext>, n: usize) -> Option<Mem> {
    // SAFETY: the memory is uninitialised; `fill` writes every float it exposes first.
    let mut buf = unsafe { ctx.alloc_pinned_with_flags::<f32>(n.max(1), 0) }.ok()?;
    let ptr = buf.as_mut_ptr().ok()?;
    Some(Mem::Locked { buf, ptr })
}

/// Buffers given back by the passes' callers, for later passes: page-locked memory is
/// allocated once, not every step, also where several passes' logits are alive at once (the
/// deterministic server runs a pass a sequence and samples them together).
#[derive(Default)]
pub(crate) struct HostLogitsPool {
    free: Mutex<Vec<HostLogits>>,
}

impl HostLogitsPool {
    /// A kept buffer for `n` floats of the kind `locked` asks for: the smallest that holds
    /// them, else the largest ([`HostLogits::fill`] grows it), else a new empty one.
    pub fn take(&self, n: usize, locked: bool) -> HostLogits {
        let mut free = self.free.lock().expect("logits pool poisoned");
        let kind = |h: &HostLogits| h.is_locked() == (locked && n <= LOCKED_MAX_FLOATS);
        let fits = (0..free.len())
            .filter(|&i| kind(&free[i]) && free[i].capacity() >= n)
            .min_by_key(|&i| free[i].capacity());
        let pick = fits.or_else(|| {
            (0..free.len())
                .filter(|&i| kind(&free[i]))
                .max_by_key(|&i| free[i].capacity())
        });
        pick.map_or_else(HostLogits::default, |i| free.swap_remove(i))
    }

    /// Keeps `h` for a later [`Self::take`] (not an empty one: an empty pass's); past
    /// [`POOL_MAX`] buffers, the smallest goes.
    pub fn put(&self, h: HostLogits) {
        if h.capacity() == 0 {
            return;
        }
        let mut free = self.free.lock().expect("logits pool poisoned");
        free.push(h);
        if free.len() > POOL_MAX {
            let smallest = (0..free.len())
                .min_by_key(|&i| free[i].capacity())
                .expect("not empty");
            free.swap_remove(smallest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pageable(cap: usize) -> HostLogits {
        HostLogits {
            mem: Mem::Pageable(Vec::with_capacity(cap)),
            len: 0,
        }
    }

    /// The pool hands out the smallest kept buffer that holds a pass's logits, else the
    /// largest (to grow), else a new one; and keeps at most `POOL_MAX`, dropping the smallest.
    #[test]
    fn pool_takes_the_tightest_fit_and_keeps_the_largest() {
        let pool = HostLogitsPool::default();
        for cap in [100, 10, 1000] {
            pool.put(pageable(cap));
        }
        assert_eq!(pool.take(50, false).capacity(), 100);
        assert_eq!(pool.take(5000, false).capacity(), 1000);
        assert_eq!(pool.take(1, false).capacity(), 10);
        // Empty now: a new buffer; an empty one is not kept.
        assert_eq!(pool.take(1, false).capacity(), 0);
        pool.put(pageable(0));
        assert!(pool.free.lock().unwrap().is_empty());
        for cap in 1..=POOL_MAX + 3 {
            pool.put(pageable(cap * 8));
        }
        let free = pool.free.lock().unwrap();
        assert_eq!(free.len(), POOL_MAX);
        assert_eq!(free.iter().map(|h| h.capacity()).min(), Some(4 * 8));
    }
}
