//! Ahead-of-time kernel images, so that a user with only the NVIDIA driver can run the CUDA
//! backend: when this machine has NVRTC and the CUDA headers (found as at run time, by the same
//! code), every file of `kernels::FILES` is compiled for each architecture of `DEFAULT_ARCHS`,
//! with the run-time options, and embedded through `$OUT_DIR/aot_table.rs` (read by `src/aot.rs`).
//! Without NVRTC the table is empty and the build goes on; the binary then compiles at run time.
//!
//! Switches (build time): `FERROLM_AOT=0` skips it (a fast kernel-development loop);
//! `FERROLM_AOT_ARCHS=sm_90a,sm_80` replaces the list of architectures.

// The run-time modules that find and drive NVRTC, shared rather than copied.
#[allow(dead_code)]
#[path = "src/cache.rs"]
mod cache;
#[allow(dead_code)]
#[path = "src/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "src/kernels.rs"]
mod kernels;
#[allow(dead_code)]
#[path = "src/libs.rs"]
mod libs;
#[allow(dead_code)]
#[path = "src/nvrtc.rs"]
mod nvrtc;

use kernels::{KernelFile, FILES, HEADERS};
use nvrtc::{Target, Toolchain};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A100 (sm_80), the other Ampere GPUs (sm_86), Ada (sm_89), and Hopper with its
/// arch-specific instructions (sm_90a).
const DEFAULT_ARCHS: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90a"];

/// Environment the outcome depends on; cargo reruns this script when one changes.
const ENV_INPUTS: &[&str] = &[
    "FERROLM_AOT",
    "FERROLM_AOT_ARCHS",
    "FERROLM_NVRTC",
    "FERROLM_CUDA_INCLUDE",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
];

/// One compiled image, as the table names it.
struct Image {
    file: &'static str,
    arch: String,
    path: PathBuf,
}

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    for var in ENV_INPUTS {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let archs = archs();
    let table = match build_images(&out, &archs) {
        Ok((tc, images)) => table(Some(tc.version), &archs, None, &images),
        Err(why) => {
            println!("cargo:warning=ferrolm-cuda: no ahead-of-time CUDA kernels embedded: {why}");
            table(None, &archs, Some(&why), &[])
        }
    };
    std::fs::write(out.join("aot_table.rs"), table).expect("writing aot_table.rs to OUT_DIR");
}

/// `FERROLM_AOT_ARCHS`, else the default list. A malformed entry stops the build.
fn archs() -> Vec<String> {
    let Some(list) = std::env::var("FERROLM_AOT_ARCHS")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        return DEFAULT_ARCHS.iter().map(|a| a.to_string()).collect();
    };
    let archs: Vec<String> = list.split(',').map(|a| a.trim().to_string()).collect();
    for a in &archs {
        let digits = a.strip_prefix("sm_").map(|r| r.trim_end_matches('a'));
        if !digits.is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())) {
            panic!(
                "FERROLM_AOT_ARCHS={list:?}: {a:?} is not a cubin architecture \
                 (expected a comma-separated list such as sm_80,sm_90a)"
            );
        }
    }
    archs
}

/// Compiles every file for every arch, or says why not. A kernel that does not compile is a
/// build error (the binary would otherwise ship without it, silently).
fn build_images(out: &Path, archs: &[String]) -> Result<(Toolchain, Vec<Image>), String> {
    if std::env::var("FERROLM_AOT").is_ok_and(|v| v == "0") {
        return Err("FERROLM_AOT=0".into());
    }
    let tc = Toolchain::find().map_err(|e| {
        format!(
            "{e} (kernels will be compiled at run time; to embed them, install NVRTC, then \
             `touch crates/cuda/build.rs` and rebuild)"
        )
    })?;
    let dir = out.join("aot");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let cache = cache_dir(out);
    let mut jobs: Vec<(&KernelFile, Target)> = archs
        .iter()
        .flat_map(|a| FILES.iter().map(move |f| (f, Target::new(a.as_str()))))
        .collect();
    // Longest first, so that the threads finish together; a translation unit's size is a
    // rough but free stand-in for its compile time.
    jobs.sort_by_key(|(f, _)| std::cmp::Reverse(unit_size(f)));
    let next = AtomicUsize::new(0);
    let images = Mutex::new(Vec::new());
    let threads = std::env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(2)
        .min(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .clamp(1, jobs.len().max(1));
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some((file, target)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let image = cache::compile_in(cache.as_deref(), &tc, file, target)
                        .unwrap_or_else(|e| {
                            panic!("{e}\n(FERROLM_AOT=0 builds without embedded kernels)")
                        });
                    let stem = file.name.trim_end_matches(".cu");
                    let path = dir.join(format!("{stem}.{}.cubin.deflate", target.arch));
                    std::fs::write(&path, deflate(&image))
                        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
                    images.lock().unwrap().push(Image {
                        file: file.name,
                        arch: target.arch.clone(),
                        path,
                    });
                }
            });
        }
    });
    let mut images = images.into_inner().unwrap();
    // A stable table: the same sources give the same generated file.
    images.sort_by(|a, b| (a.file, &a.arch).cmp(&(b.file, &b.arch)));
    eprintln!(
        "ferrolm-cuda: {} AOT images ({} archs) in {:.1} s on {threads} threads",
        images.len(),
        archs.len(),
        started.elapsed().as_secs_f64()
    );
    Ok((tc, images))
}

/// Bytes of a file plus the headers it includes.
fn unit_size(file: &KernelFile) -> usize {
    let included = HEADERS
        .iter()
        .filter(|h| file.source.contains(&format!("#include \"{}\"", h.name)));
    file.source.len() + included.map(|h| h.source.len()).sum::<usize>()
}

/// A compile cache shared by the build profiles (dev, test, release, clippy each run this
/// script): `<target dir>/ferrolm-aot-cache`, found above `OUT_DIR`
/// (`<target dir>[/<triple>]/<profile>/build/<pkg>-<hash>/out`). `cargo clean` empties it.
fn cache_dir(out: &Path) -> Option<PathBuf> {
    let build = out
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))?;
    Some(build.parent()?.parent()?.join("ferrolm-aot-cache"))
}

/// The generated Rust: constants `BUILT_WITH`, `ARCHS`, `SKIPPED` and `IMAGES`.
fn table(
    version: Option<(i32, i32)>,
    archs: &[String],
    skipped: Option<&str>,
    images: &[Image],
) -> String {
    let mut t = String::from("// Generated by crates/cuda/build.rs.\n");
    let _ = writeln!(t, "pub const BUILT_WITH: Option<(i32, i32)> = {version:?};");
    let _ = writeln!(t, "pub const ARCHS: &[&str] = &{archs:?};");
    let _ = writeln!(t, "pub const SKIPPED: Option<&str> = {skipped:?};");
    t.push_str("pub const IMAGES: &[AotImage] = &[\n");
    for img in images {
        let file = KernelFile::named(img.file).expect("a file of FILES");
        let _ = writeln!(
            t,
            "    AotImage {{ file: {:?}, arch: {:?}, source_hash: {:?}, deflated: include_bytes!({:?}) }},",
            img.file,
            img.arch,
            file.source_hash(),
            img.path.display().to_string()
        );
    }
    t.push_str("];\n");
    t
}

/// The image as stored in the binary: raw deflate (the images shrink about 3.6x).
fn deflate(image: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(image).expect("deflating into memory");
    e.finish().expect("deflating into memory")
}
