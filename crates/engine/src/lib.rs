//! Running a model: loading it onto a backend, sessions with their KV cache, sampling.

mod model;
mod session;

pub use model::Model;
pub use session::{EngineError, Logits, Session};
