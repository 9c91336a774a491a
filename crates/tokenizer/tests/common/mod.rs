//! Locating the real SmolLM2 model for the tests that need it.
#![allow(dead_code)] // each test binary uses part of this

use ferrolm_gguf::GgufFile;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where the default model (SmolLM2-135M-Instruct Q4_1) is: `$FERROLM_TEST_MODEL`, else the
/// ferrolm cache (`$FERROLM_CACHE`, else `~/.cache/ferrolm`). Under CI (`CI` set) a missing model
/// is pulled into the cache first, as `ferrolm pull` would (once per test binary, not once per
/// test thread).
pub fn find_model() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(locate).clone()
}

fn locate() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("FERROLM_TEST_MODEL") {
        let p = PathBuf::from(p);
        return match p.is_file() {
            true => Ok(p),
            false => Err(format!("FERROLM_TEST_MODEL={} is not a file", p.display())),
        };
    }
    let pull = std::env::var_os("CI").is_some();
    ferrolm_hub::resolve_default(pull).map_err(|e| e.to_string())
}

/// The opened model. Without it, a test under CI fails; elsewhere it is skipped with a note
/// saying how to get the model.
pub fn require_model(test: &str) -> Option<GgufFile> {
    match find_model() {
        Ok(p) => Some(GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))),
        Err(why) => {
            let how = format!(
                "the SmolLM2 model is not available: {why} (or set FERROLM_TEST_MODEL to a .gguf)"
            );
            if std::env::var_os("CI").is_some() {
                panic!("{test}: {how}");
            }
            eprintln!("SKIPPED {test}: {how}");
            None
        }
    }
}

/// `../shared/golden` beside the repository.
pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden")
}
