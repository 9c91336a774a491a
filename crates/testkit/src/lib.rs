//! What the golden tests of several crates share: reading llama.cpp's goldens (`.json` or
//! `.json.gz`) and the bars they are held to ([`golden`]), and the golden models, which are
//! regenerated from their recipes with ferrolm's own generator and quantizer and must be
//! byte for byte the file llama.cpp ran ([`recipes`]).

pub mod golden;
pub mod recipes;

pub use golden::{Case, Golden, Stats, Tally};
pub use recipes::{model_for, sha256};

/// A file of the shared tiny goldens (`../shared/golden` beside the repository, or
/// `FERROLM_GOLDEN_DIR` on the GPU machine).
pub fn shared_golden(name: &str) -> std::path::PathBuf {
    match std::env::var("FERROLM_GOLDEN_DIR") {
        Ok(dir) => std::path::Path::new(&dir).join(name),
        Err(_) => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/golden")
            .join(name),
    }
}
