//! CPU kernels and the CPU backend. Activations are row-major f32 `[n_tokens][width]`;
//! weights are ggml tensors (row `r` of a `[cols, rows]` ggml tensor is output feature `r`),
//! read in place from the map. [`CpuModel`] runs the shared forward pass on them.

pub mod attention;
pub mod backend;
pub mod hadamard;
pub mod kv;
pub mod matmul;
pub mod moe;
pub mod norm;
pub mod plan;
pub mod rope;
pub mod runner;
pub mod split;

pub use backend::{CpuBackend, CpuCache, CpuInputs, CpuWeight, Mat};
pub use kv::{KvElem, KvType};
pub use plan::{AttnPath, CpuPlan, PlanError};
pub use runner::CpuModel;
pub use split::{CpuSplit, CpuSplitModel, HostCollective, SplitCache};
