//! Model architectures: hyperparameters, tensor layouts, presets and quantization policy,
//! plus the tools built on them: synthetic random-weight models and GGUF quantization.

mod arch;
pub mod backend;
mod config;
mod deepseek2;
pub mod dump;
mod error;
pub mod forward;
mod known;
mod layout;
mod mla;
pub mod policy;
pub mod presets;
mod quantize;
mod recipe;
pub mod rope;
mod runner;
pub mod split;
mod stream;
mod synth;
mod vocab;
pub mod weights;

pub use arch::Arch;
pub use config::{key, Biases, Config, Deepseek2, MoeConfig};
pub use error::{ModelError, Result};
pub use layout::{block_tensor, tensor_specs, TensorId, TensorKind, TensorRole, TensorSpec};
pub use policy::{choose_types, FileType, PolicyModel, TensorRef};
pub use presets::{preset, Preset};
pub use quantize::{plan_quantize, quantize_gguf};
pub use recipe::{synth_recipe, write_recipe, Init, Recipe, RecipeTensor};
pub use runner::{GreedyPick, ModelRunner};
pub use stream::Progress;
pub use synth::{Synth, VocabKind, POOL_BLOCKS};

/// llama.cpp's `GGML_QNT_VERSION`, written as `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;
