//! `FERROLM_CUDA_PROFILE=1`: device time per stage of the forward pass, from CUDA events
//! recorded around each stage (no synchronization between stages, so the figures are the
//! kernels' own time plus the gaps between them, not host launch overhead). Profiling turns
//! graph replay off, since events cannot be recorded inside a capture. The plan parses the
//! switch; whoever builds one ([`CudaBackend`](crate::CudaBackend), `cuda-parity`) turns
//! recording on here with [`set_enabled`].
//!
//! Stages are named by the backend ("attention", "moe.gate_up", ...); [`report`] waits for the
//! device and sums every span recorded since the last [`reset`].

use cudarc::driver::{sys, CudaEvent, CudaStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

struct Span {
    name: &'static str,
    start: CudaEvent,
    end: CudaEvent,
}

static SPANS: Mutex<Vec<Span>> = Mutex::new(Vec::new());

static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are recorded (process-wide, as the spans are).
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Turns recording on or off (the plan's `profile`).
pub fn set_enabled(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Runs `f`, which queues work on `stream`, and records its device time under `name`.
pub fn span<R>(stream: &CudaStream, name: &'static str, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let ctx = stream.context();
    let (Ok(start), Ok(end)) = (ctx.new_event(flags), ctx.new_event(flags)) else {
        return f();
    };
    let _ = start.record(stream);
    let r = f();
    let _ = end.record(stream);
    SPANS
        .lock()
        .expect("profile poisoned")
        .push(Span { name, start, end });
    r
}

pub fn reset() {
    SPANS.lock().expect("profile poisoned").clear();
}

/// Total ms per stage since the last reset, largest first, with `calls`.
pub fn totals() -> Vec<(&'static str, f64, usize)> {
    let spans = std::mem::take(&mut *SPANS.lock().expect("profile poisoned"));
    let mut out: Vec<(&'static str, f64, usize)> = Vec::new();
    for s in &spans {
        let _ = s.end.synchronize();
        let ms = f64::from(s.start.elapsed_ms(&s.end).unwrap_or(0.0));
        match out.iter_mut().find(|(n, _, _)| *n == s.name) {
            Some(t) => {
                t.1 += ms;
                t.2 += 1;
            }
            None => out.push((s.name, ms, 1)),
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// [`totals`] divided by `passes` (per pass), as a markdown table with shares.
pub fn report(passes: usize) -> String {
    let k = 1.0 / passes.max(1) as f64;
    let t: Vec<_> = totals()
        .into_iter()
        .map(|(n, ms, c)| (n, ms * k, c / passes.max(1)))
        .collect();
    let sum: f64 = t.iter().map(|x| x.1).sum();
    let mut s =
        String::from("| stage | calls / pass | ms / pass | share |\n|---|---:|---:|---:|\n");
    for (name, ms, calls) in &t {
        let share = if sum > 0.0 { 100.0 * ms / sum } else { 0.0 };
        s += &format!("| {name} | {calls} | {ms:.3} | {share:.1}% |\n");
    }
    s += &format!("| total | | {sum:.3} | |\n");
    s
}
