//! Running a model: loading it onto a backend, sessions with their KV cache, sampling.

mod batch;
mod generate;
mod model;
mod sampler;
mod session;

pub use batch::{SeqCache, SeqInput};
pub use ferrolm_cpu::KvType;
pub use generate::{generate, held_back, GenerateParams, GenerateStats, StopReason};
pub use model::{Cache, Device, Model};
pub use sampler::{argmax, Sampler, SamplerConfig};
pub use session::{common_prefix, EngineError, Logits, Session};

/// Makes every forward pass's results independent of its batch's row count (the CPU matmul
/// then uses one kernel at every size). A server batching sequences turns it on, so a greedy
/// answer is the same alone or under load; the cost is the mat-vec kernel's speed at one row.
pub fn set_batch_invariant(on: bool) {
    ferrolm_cpu::matmul::set_batch_invariant(on);
}
