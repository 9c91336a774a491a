//! Model architectures: hyperparameters, tensor layouts, presets and quantization policy.

pub mod arch;
pub mod backend;
pub mod config;
pub mod error;
pub mod forward;
pub mod layout;
pub mod weights;

pub use arch::Arch;
pub use config::{Config, MoeConfig};
pub use error::{ModelError, Result};
