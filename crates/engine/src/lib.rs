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
