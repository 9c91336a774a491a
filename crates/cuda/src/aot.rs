//! Kernel images compiled ahead of time by `build.rs` and embedded in the binary, so that a
//! machine with only the NVIDIA driver runs the common GPUs without NVRTC.
//!
//! An image is used for a file when its arch is the device's target and its source hash is
//! the hash of the source compiled into this binary ([`image`]); every other case takes the
//! run-time path (disk cache, NVRTC). Contract: an embedded image is the bytes NVRTC gives at
//! run time for the same file, target and NVRTC version (the same code compiles both, with the
//! same options; the unit tests check it when NVRTC is present). `FERROLM_CUDA_AOT=0` ignores
//! the embedded images, for kernel development and bisecting.

use crate::kernels::{KernelFile, FILES};
use crate::nvrtc::Target;

/// One embedded image: `file` (a name of [`FILES`]) compiled for `arch`.
#[derive(Clone, Copy, Debug)]
pub struct AotImage {
    pub file: &'static str,
    pub arch: &'static str,
    /// [`KernelFile::source_hash`] of the source the image was compiled from.
    pub source_hash: &'static str,
    /// The cubin, raw-deflated by `build.rs` ([`AotImage::bytes`] inflates it).
    pub deflated: &'static [u8],
}

impl AotImage {
    /// The cubin itself.
    pub fn bytes(&self) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::with_capacity(self.deflated.len() * 4);
        flate2::read::DeflateDecoder::new(self.deflated)
            .read_to_end(&mut out)
            .expect("an image deflated by build.rs");
        out
    }
}

/// The table `build.rs` wrote. BUILT_WITH: the NVRTC version of the images (None: none
/// embedded); ARCHS: the architectures asked for; SKIPPED: why none were embedded; IMAGES: the
/// images, sorted by file and arch. ARCHS and SKIPPED are for the tests.
#[cfg_attr(not(test), allow(dead_code))]
mod table {
    use super::AotImage;
    include!(concat!(env!("OUT_DIR"), "/aot_table.rs"));
}
pub use table::BUILT_WITH;
use table::IMAGES;
#[cfg(test)]
use table::{ARCHS, SKIPPED};

/// Whether embedded images may be used: not turned off by `FERROLM_CUDA_AOT=0`, and a driver
/// that loads what this NVRTC compiled (a cubin needs a driver of its CUDA major version or
/// newer; `driver_version` as the driver reports it, 13000 for 13.0).
pub fn usable(driver_version: i32) -> bool {
    let off = std::env::var("FERROLM_CUDA_AOT").is_ok_and(|v| v == "0");
    match BUILT_WITH {
        Some((major, _)) => !off && driver_version / 1000 >= major,
        None => false,
    }
}

/// The embedded image of `file` for `target`, if one was compiled from this very source.
pub fn image(file: &KernelFile, target: &Target) -> Option<&'static AotImage> {
    let found = IMAGES
        .iter()
        .find(|i| i.file == file.name && i.arch == target.arch)?;
    (found.source_hash == file.source_hash()).then_some(found)
}

/// Whether every kernel file has an embedded image for `target`: then NVRTC is not needed.
pub fn covers(target: &Target) -> bool {
    FILES.iter().all(|f| image(f, target).is_some())
}

/// The target of a device of compute capability `cc` when the embedded images cover every
/// file for it and may be used: then the device needs no NVRTC. `None`: NVRTC decides.
pub fn target_without_nvrtc(cc: (i32, i32), driver_version: i32) -> Option<Target> {
    let native = Target::native(cc);
    (usable(driver_version) && covers(&native)).then_some(native)
}

/// The architectures with at least one embedded image, for messages: "sm_80, sm_90a".
pub fn embedded_archs() -> String {
    let mut archs: Vec<&str> = IMAGES.iter().map(|i| i.arch).collect();
    archs.sort_unstable();
    archs.dedup();
    if archs.is_empty() {
        return "none".into();
    }
    archs.join(", ")
}

/// The sm number a cubin was compiled for (90 for `sm_90a`), read from its ELF header:
/// 64-bit, little-endian, machine EM_CUDA (190), the number in `e_flags`. Where depends on the
/// header's ABI version: bits 8..16 from ABI 8 (CUDA 12.8 on), the low byte before. The `a` of
/// an arch-specific target does not show there (NVRTC 13.0 writes the same flags for sm_90 and
/// sm_90a). For the tests of the embedded images.
#[cfg(test)]
pub fn cubin_sm(image: &[u8]) -> Result<u32, String> {
    let header = image.get(..64).ok_or("shorter than an ELF header")?;
    if &header[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if header[4] != 2 || header[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let machine = u16::from_le_bytes([header[18], header[19]]);
    if machine != 190 {
        return Err(format!("ELF machine {machine}, not EM_CUDA (190)"));
    }
    let abi_version = header[8];
    let flags = u32::from_le_bytes(header[48..52].try_into().expect("4 bytes"));
    Ok(if abi_version >= 8 {
        (flags >> 8) & 0xff
    } else {
        flags & 0xff
    })
}

#[cfg(test)]
mod tests;
