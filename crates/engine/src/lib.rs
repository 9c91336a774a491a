//! Running a model: loading it onto a backend, sessions with their KV cache, sampling.

mod batch;
pub mod constraint;
mod generate;
mod memory;
mod model;
mod sampler;
mod session;

pub use batch::{BatchLogits, BatchPicks, SeqCache, SeqInput};
pub use ferrolm_cpu::{KvElem, KvType};
/// Device time per stage of the CUDA backend's passes (`FERROLM_CUDA_PROFILE`), for `bench`.
pub use ferrolm_cuda::profile as cuda_profile;
pub use ferrolm_model::GreedyPick;
pub use generate::{generate, held_back, GenerateParams, GenerateStats, StopReason};
pub use memory::available_ram;
pub use model::{Cache, Device, Model};
pub use sampler::{argmax, greedy_pick, Sampler, SamplerConfig};
pub use session::{common_prefix, EngineError, Logits, Session};
