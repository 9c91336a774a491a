//! Finding CUDA's shared libraries and headers at run time.
//!
//! cudarc opens each library by file name (`dlopen("libnvrtc.so.13")`), which finds only what
//! the dynamic loader's path holds. NVRTC is often elsewhere: in a toolkit folder that is not
//! on the path, or in the PyPI package `nvidia-cuda-nvrtc` (what CI uses). So when the loader
//! cannot find it, we search those places and open the library by its full path first; a later
//! `dlopen` by the same soname then returns the library already loaded. NVRTC in turn opens
//! `libnvrtc-builtins.so.13.0` by name, so that one is preloaded the same way, before it.
//!
//! Overrides: `FERROLM_NVRTC` (the library file, or its folder) and `FERROLM_CUDA_INCLUDE` (the
//! folder holding `cuda_fp16.h`).

use crate::error::{CudaError, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Whether the NVIDIA driver library can be opened.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the candidate names and closes them again.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Where NVRTC was found (for messages): "system" or the folder it was preloaded from.
pub fn ensure_nvrtc() -> Result<&'static str> {
    static FOUND: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    let found = FOUND.get_or_init(find_and_preload_nvrtc);
    match found {
        Ok(place) => Ok(place.as_str()),
        Err(searched) => Err(CudaError::NoNvrtc {
            searched: searched.clone(),
        }),
    }
}

fn nvrtc_loadable() -> bool {
    // SAFETY: as in driver_present.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn find_and_preload_nvrtc() -> std::result::Result<String, String> {
    let explicit = env_path("FERROLM_NVRTC");
    if explicit.is_none() && nvrtc_loadable() {
        return Ok("system".into());
    }
    let mut dirs = Vec::new();
    if let Some(p) = &explicit {
        dirs.push(if p.is_file() {
            p.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            p.clone()
        });
    }
    for root in toolkit_roots() {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("lib"));
        dirs.push(root.join("targets/x86_64-linux/lib"));
    }
    if let Some(sp) = python_nvidia_root() {
        dirs.push(sp.join("nvidia/cu13/lib"));
    }
    let explicit_file = explicit.as_deref().filter(|p| p.is_file());
    for (i, dir) in dirs.iter().enumerate() {
        let file = if i == 0 { explicit_file } else { None };
        if preload_from(dir, file) && nvrtc_loadable() {
            return Ok(dir.display().to_string());
        }
    }
    let mut searched = vec!["the dynamic loader's path".to_string()];
    searched.extend(dirs.iter().map(|d| d.display().to_string()));
    Err(searched.join(", "))
}

/// Opens the builtins and then NVRTC itself from `dir`, keeping both loaded for good.
fn preload_from(dir: &Path, file: Option<&Path>) -> bool {
    let pick = |prefix: &str| -> Option<PathBuf> {
        let mut hits: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                // `.alt.` builds are an alternative ABI shipped beside the main one.
                name.starts_with(prefix) && !name.contains(".alt.")
            })
            .collect();
        hits.sort();
        hits.pop()
    };
    let Some(lib) = file
        .map(Path::to_path_buf)
        .or_else(|| pick("libnvrtc.so.13"))
    else {
        return false;
    };
    for path in pick("libnvrtc-builtins.so.13").into_iter().chain([lib]) {
        // SAFETY: NVRTC's initialisers are sound to run; the handle is leaked on purpose so the
        // library stays mapped for the life of the process, as cudarc expects of it.
        match unsafe { libloading::Library::new(&path) } {
            Ok(l) => std::mem::forget(l),
            Err(_) => return false,
        }
    }
    true
}

/// Whether NCCL can be opened as cudarc opens it (by the names `libnccl.so`,
/// `libnccl.so.13`, ..., never NCCL's own soname `libnccl.so.2`, so a copy known only by
/// that name, as the PyPI wheel ships it, needs a `libnccl.so` link on the loader's path).
pub fn ensure_nccl() -> Result<()> {
    // SAFETY: only tries to dlopen the candidate names and closes them again.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    let mut dirs: Vec<PathBuf> = toolkit_roots().iter().map(|r| r.join("lib64")).collect();
    dirs.extend(["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"].map(PathBuf::from));
    if let Some(sp) = python_nvidia_root() {
        dirs.push(sp.join("nvidia/nccl/lib"));
    }
    let seen = dirs
        .iter()
        .map(|d| d.join("libnccl.so.2"))
        .find(|f| f.exists());
    Err(CudaError::NoNccl {
        found: seen.map_or(String::new(), |f| {
            format!(
                " (there is {}, which cudarc does not open by that name)",
                f.display()
            )
        }),
    })
}

/// The folder holding `cuda_fp16.h`.
pub fn include_dir() -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = env_path("FERROLM_CUDA_INCLUDE").into_iter().collect();
    for root in toolkit_roots() {
        dirs.push(root.join("include"));
        dirs.push(root.join("targets/x86_64-linux/include"));
    }
    if let Some(sp) = python_nvidia_root() {
        dirs.push(sp.join("nvidia/cu13/include"));
    }
    dirs.iter()
        .find(|d| d.join("cuda_fp16.h").is_file())
        .cloned()
        .ok_or_else(|| CudaError::NoHeaders {
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// `$CUDA_HOME`, `$CUDA_PATH`, then `/usr/local/cuda`.
fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| env_path(v))
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots
}

/// The site-packages folder holding Python's `nvidia` namespace package (the PyPI wheels
/// `nvidia-cuda-nvrtc` and `nvidia-cuda-runtime` install under it), asked of `python3` once.
pub fn python_nvidia_root() -> Option<PathBuf> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))",
            ])
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let path = String::from_utf8(out.stdout).ok()?;
        let path = PathBuf::from(path.trim());
        (out.status.success() && path.is_dir()).then_some(path)
    })
    .clone()
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}
