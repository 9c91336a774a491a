//! Every kernel compiles with NVRTC, without a GPU: CI gets NVRTC from the PyPI package
//! `nvidia-cuda-nvrtc` and the headers from `nvidia-cuda-runtime` (both in
//! `.ci/requirements.txt`); a machine with the toolkit uses `$CUDA_HOME` or `/usr/local/cuda`.
//! Under CI a missing NVRTC fails the test; elsewhere the test is skipped with a note.

use ferrolm_cuda::kernels::{KernelFile, FILES};
use ferrolm_cuda::nvrtc::{Target, Toolchain};
use ferrolm_cuda::CudaError;

fn toolchain() -> Option<Toolchain> {
    match Toolchain::find() {
        Ok(tc) => Some(tc),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
            assert!(!ci, "CI must compile the kernels, but: {e}");
            eprintln!(
                "note: kernel compile test skipped: {e}\n(python3 -m pip install -r .ci/requirements.txt provides NVRTC)"
            );
            None
        }
    }
}

/// Hopper with its arch-specific instructions (what the H200 runs) and Ampere, the oldest
/// architecture the issue targets.
#[test]
fn every_kernel_compiles_for_sm_90a_and_sm_80() {
    let Some(tc) = toolchain() else { return };
    eprintln!(
        "NVRTC {}.{} from {}, headers from {}",
        tc.version.0,
        tc.version.1,
        tc.origin,
        tc.include_dir.display()
    );
    let jobs: Vec<(&KernelFile, Target)> = ["sm_90a", "sm_80"]
        .iter()
        .flat_map(|arch| FILES.iter().map(move |f| (f, Target::new(*arch))))
        .collect();
    // Two at a time: CI has two cores, and mmvq.cu alone takes most of the time.
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(2))
            .map(|chunk| {
                let tc = &tc;
                s.spawn(move || {
                    for (file, target) in chunk {
                        let t = std::time::Instant::now();
                        let (cubin, log) = tc
                            .compile_with_log(file, target)
                            .unwrap_or_else(|e| panic!("{e}\n{}", log_of(&e)));
                        // Warnings are bugs in waiting (an unused result, a narrowing).
                        assert!(!log.contains("warning"), "{}: {log}", file.name);
                        // An ELF image: the driver loads it as is.
                        assert_eq!(&cubin[..4], b"\x7fELF", "{} {}", file.name, target.arch);
                        eprintln!(
                            "{} for {}: {} bytes in {:.1} s",
                            file.name,
                            target.arch,
                            cubin.len(),
                            t.elapsed().as_secs_f64()
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("compile thread panicked");
        }
    });
}

fn log_of(e: &CudaError) -> &str {
    match e {
        CudaError::Compile { log, .. } => log,
        _ => "",
    }
}

/// A compile error names the kernel file and the line, through headers too.
#[test]
fn compile_errors_name_the_file_and_line() {
    let Some(tc) = toolchain() else { return };
    let broken = KernelFile {
        name: "broken.cu",
        source: "#include \"common.cuh\"\n\nextern \"C\" __global__ void k(float *x) {\n    x[0] = undefined_name;\n}\n",
    };
    let err = tc.compile(&broken, &Target::new("sm_90a")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("kernels/broken.cu:4"), "{msg}");
    assert!(msg.contains("undefined_name"), "{msg}");
    // PTX for a GPU newer than NVRTC knows.
    let ptx = tc.compile(&FILES[0], &Target::new("compute_90")).unwrap();
    assert!(String::from_utf8_lossy(&ptx).contains(".target sm_90"));
}
