//! One module per subcommand.

pub mod bench;
pub mod bench_batched;
pub mod chat;
pub mod common;
pub mod cuda_parity;
pub mod inspect;
pub mod logits;
pub mod perplexity;
pub mod pull;
pub mod quantize;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;
mod tooling;
