//! Compiled kernel images on disk, so NVRTC runs once per source change, not once per process.
//!
//! Folder: `$FERROLM_CACHE/cubin`, else `~/.cache/ferrolm/cubin` (the model cache's root). Key:
//! SHA-256 of the file's [`source_hash`](KernelFile::source_hash) (its source and every
//! header), the compile options (they hold the target), and the NVRTC version; the file name
//! repeats the file, target and version so that the folder is readable. A failure to read or
//! write the cache only costs a compile.

use crate::error::Result;
use crate::kernels::KernelFile;
use crate::nvrtc::{Target, Toolchain};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The cache folder, if a home or `FERROLM_CACHE` is known.
pub fn dir() -> Option<PathBuf> {
    if let Some(root) = std::env::var_os("FERROLM_CACHE").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(root).join("cubin"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    Some(PathBuf::from(home).join(".cache/ferrolm/cubin"))
}

/// The cache file name for `file` compiled by `tc` for `target`.
pub fn key(tc: &Toolchain, file: &KernelFile, target: &Target) -> String {
    let mut h = Sha256::new();
    h.update(file.source_hash().as_bytes());
    // The include folder is part of the options: other headers, another key.
    for opt in tc.options(target) {
        h.update(opt.as_bytes());
    }
    h.update(format!("nvrtc {}.{}", tc.version.0, tc.version.1).as_bytes());
    let hash: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let stem = file.name.trim_end_matches(".cu");
    let ext = if target.is_ptx() { "ptx" } else { "cubin" };
    format!(
        "{stem}-{}-nvrtc{}.{}-{hash}.{ext}",
        target.arch, tc.version.0, tc.version.1
    )
}

/// Stores an image in the cache folder.
pub fn store(key: &str, image: &[u8]) {
    if let Some(dir) = dir() {
        store_in(&dir, key, image);
    }
}

/// Stores an image: written beside its final name, then renamed, so that a reader never sees
/// half a file even with several processes compiling at once.
fn store_in(dir: &Path, key: &str, image: &[u8]) {
    let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
    let ok = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, image))
        .and_then(|()| std::fs::rename(&tmp, dir.join(key)));
    if ok.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Compiles through the cache: the cached image if present, else NVRTC, then stored.
pub fn compile(tc: &Toolchain, file: &KernelFile, target: &Target) -> Result<Vec<u8>> {
    compile_in(dir().as_deref(), tc, file, target)
}

/// [`compile`] with the cache in `dir` (none: no cache). build.rs keeps its own, in the target
/// folder, so that each build profile does not compile the same images again.
pub fn compile_in(
    dir: Option<&Path>,
    tc: &Toolchain,
    file: &KernelFile,
    target: &Target,
) -> Result<Vec<u8>> {
    let key = key(tc, file, target);
    if let Some(image) = dir.and_then(|d| std::fs::read(d.join(&key)).ok()) {
        return Ok(image);
    }
    let image = tc.compile(file, target)?;
    if let Some(dir) = dir {
        store_in(dir, &key, &image);
    }
    Ok(image)
}

/// Drops a cached image (one that the driver refused to load, say).
pub fn evict(tc: &Toolchain, file: &KernelFile, target: &Target) {
    if let Some(dir) = dir() {
        let _ = std::fs::remove_file(dir.join(key(tc, file, target)));
    }
}
