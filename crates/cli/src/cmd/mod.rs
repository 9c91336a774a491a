//! One module per subcommand.

pub mod inspect;
pub mod pull;
pub mod quantize;
pub mod synth;
mod tooling;
