//! Which kernel images this run uses. When the binary embeds images for the device
//! (`ferrolm_cuda::aot`), every file must load from them: one compiled instead means the
//! driver refused its embedded image, and the table below would then test NVRTC's kernels
//! rather than the ones users without NVRTC get. `FERROLM_CUDA_AOT=0` runs the same checks on
//! NVRTC's images, so the two runs together cover both paths.

use anyhow::{bail, Result};
use ferrolm_cuda::{CudaDevice, ModuleOrigin};

/// Prints where each loaded file came from; an error when embedded images were expected for
/// every file and one was not used.
pub fn check_origins(dev: &CudaDevice) -> Result<()> {
    let loaded = dev.loaded_modules();
    let compiled: Vec<&str> = loaded
        .iter()
        .filter(|(_, o)| *o == ModuleOrigin::Compiled)
        .map(|(f, _)| *f)
        .collect();
    eprintln!(
        "kernel images: {} embedded, {} compiled by NVRTC ({})",
        loaded.len() - compiled.len(),
        compiled.len(),
        dev.kernel_path()
    );
    if dev.all_embedded() && !compiled.is_empty() {
        bail!(
            "the driver refused the embedded {} images of {}; they were compiled by NVRTC instead",
            dev.target().arch,
            compiled.join(", ")
        );
    }
    Ok(())
}
