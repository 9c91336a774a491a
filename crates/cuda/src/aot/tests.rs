//! The embedded table, checked without a GPU. When the build found NVRTC (CI installs it, and
//! under CI a missing table fails), the table must cover every file × arch, each image must be
//! a cubin for its arch, and each hash must be the hash of the source compiled into the crate.

use super::*;
use crate::nvrtc::Toolchain;

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// The table, or None (with a note) when the build embedded nothing.
fn built_table() -> Option<&'static [AotImage]> {
    if let Some(why) = SKIPPED {
        assert!(
            !under_ci(),
            "CI must embed AOT kernels, but the build skipped them: {why}"
        );
        eprintln!("note: no AOT images to check: {why}");
        return None;
    }
    Some(IMAGES)
}

#[test]
fn the_table_covers_every_file_and_arch() {
    let Some(images) = built_table() else { return };
    assert!(BUILT_WITH.is_some());
    assert!(!ARCHS.is_empty());
    for arch in ARCHS {
        for file in FILES {
            let hits = images
                .iter()
                .filter(|i| i.file == file.name && i.arch == *arch)
                .count();
            assert_eq!(hits, 1, "{} for {arch}: {hits} images", file.name);
        }
        assert!(covers(&Target::new(*arch)), "{arch} is not covered");
    }
    assert_eq!(
        images.len(),
        ARCHS.len() * FILES.len(),
        "images beyond FILES × ARCHS"
    );
    assert!(!covers(&Target::new("sm_75")) || ARCHS.contains(&"sm_75"));
}

#[test]
fn every_image_is_a_cubin_for_its_arch() {
    let Some(images) = built_table() else { return };
    for img in images {
        let sm =
            cubin_sm(&img.bytes()).unwrap_or_else(|e| panic!("{} {}: {e}", img.file, img.arch));
        let want: u32 = img.arch["sm_".len()..]
            .trim_end_matches('a')
            .parse()
            .expect("arch sm_NN[a]");
        assert_eq!(sm, want, "{} {}", img.file, img.arch);
    }
}

#[test]
fn every_hash_is_the_hash_of_the_embedded_source() {
    let Some(images) = built_table() else { return };
    for img in images {
        let file = KernelFile::named(img.file).expect("a file of FILES");
        assert_eq!(img.source_hash, file.source_hash(), "{}", img.file);
        assert_eq!(
            image(file, &Target::new(img.arch)).map(|i| i.deflated),
            Some(img.deflated)
        );
    }
}

/// A source that is not the one compiled into the table gets no image, so a stale table can
/// never stand in for the current kernels.
#[test]
fn another_source_gets_no_image() {
    let Some(images) = built_table() else { return };
    let real = KernelFile::named(images[0].file).unwrap();
    let edited = KernelFile {
        name: real.name,
        source: "extern \"C\" __global__ void k() {}\n",
    };
    let target = Target::new(images[0].arch);
    assert!(image(real, &target).is_some());
    assert!(image(&edited, &target).is_none());
    assert!(image(real, &Target::new("sm_1")).is_none());
}

/// The contract: an embedded image is what NVRTC gives at run time, byte for byte, for the
/// same version (checked on the small files, to keep the test fast).
#[test]
fn embedded_images_equal_run_time_compiles() {
    let Some(images) = built_table() else { return };
    let Ok(tc) = Toolchain::find() else {
        assert!(!under_ci(), "CI has NVRTC");
        return;
    };
    if Some(tc.version) != BUILT_WITH {
        eprintln!("note: NVRTC {:?} here, {BUILT_WITH:?} at build", tc.version);
        return;
    }
    let small = ["elementwise.cu", "quantize.cu", "gemm_f32.cu"];
    for img in images.iter().filter(|i| small.contains(&i.file)) {
        let file = KernelFile::named(img.file).unwrap();
        let compiled = tc.compile(file, &Target::new(img.arch)).unwrap();
        assert!(compiled == img.bytes(), "{} {} differs", img.file, img.arch);
    }
}

#[test]
fn cubin_headers_are_checked() {
    assert!(cubin_sm(b"\x7fELF").is_err());
    let mut header = [0u8; 64];
    header[..4].copy_from_slice(b"\x7fELF");
    header[4] = 2;
    header[5] = 1;
    header[8] = 8;
    header[18] = 190;
    header[48..52].copy_from_slice(&0x0900_5a04u32.to_le_bytes());
    assert_eq!(cubin_sm(&header), Ok(90));
    header[8] = 7;
    header[48..52].copy_from_slice(&0x0050_0550u32.to_le_bytes());
    assert_eq!(cubin_sm(&header), Ok(0x50));
    header[18] = 62; // x86-64
    assert!(cubin_sm(&header).unwrap_err().contains("EM_CUDA"));
}

#[test]
fn the_switch_and_the_driver_decide_use() {
    match BUILT_WITH {
        Some((major, _)) => {
            assert!(
                !usable(major * 1000 - 1000),
                "a driver older than the images' CUDA"
            );
            // FERROLM_CUDA_AOT is read per call; tests run in parallel, so only the unset case.
            if std::env::var_os("FERROLM_CUDA_AOT").is_none() {
                assert!(usable(major * 1000));
            }
        }
        None => assert!(!usable(99_000)),
    }
}

/// Which GPUs open without NVRTC: exactly those whose native target the table covers, with a
/// driver of the images' CUDA major version or newer.
#[test]
fn gpus_of_the_embedded_archs_need_no_nvrtc() {
    let Some(_) = built_table() else {
        assert!(target_without_nvrtc((9, 0), 13_000).is_none());
        return;
    };
    if std::env::var_os("FERROLM_CUDA_AOT").is_some() {
        return; // the switch is tested by hand; tests run in parallel
    }
    let driver = BUILT_WITH.unwrap().0 * 1000;
    for (cc, arch) in [
        ((8, 0), "sm_80"),
        ((8, 6), "sm_86"),
        ((8, 9), "sm_89"),
        ((9, 0), "sm_90a"),
    ] {
        let got = target_without_nvrtc(cc, driver).map(|t| t.arch);
        let want = ARCHS.contains(&arch).then(|| arch.to_string());
        assert_eq!(got, want, "cc {cc:?}");
        assert!(
            target_without_nvrtc(cc, driver - 1000).is_none(),
            "old driver, cc {cc:?}"
        );
    }
    // Not embedded by default: Turing, Blackwell.
    for cc in [(7, 5), (10, 0), (12, 0)] {
        let arch = Target::native(cc).arch;
        assert_eq!(
            target_without_nvrtc(cc, driver).is_some(),
            ARCHS.contains(&arch.as_str())
        );
    }
}
