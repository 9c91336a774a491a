//! Compiles the named kernel files (`mmvq_staged.cu` ...) with NVRTC for sm_90a and sm_80 and
//! prints each cubin's size and the compiler's log: a kernel edit checked in seconds, where
//! the `compile_kernels` test takes every file (minutes). No GPU needed.
//!
//! `FERROLM_AOT=0 cargo run --release -p ferrolm-cuda --example compile_one -- FILE.cu ...`
//!
//! With `FERROLM_CUBIN_DIR=DIR` (made if missing), each cubin is written there too
//! (`FILE.ARCH.cubin`), for `tools/perf/sass_loops.py` to read its loops. With
//! `FERROLM_PTXAS_VERBOSE=1`, the log holds
//! ptxas's registers, stack and spills for every kernel (read them before and after a change
//! to a kernel with several paths: they share one register budget). `FERROLM_COMPILE_ARCHS=a,b`
//! compiles for those targets only (default sm_90a,sm_80).

use ferrolm_cuda::kernels::FILES;
use ferrolm_cuda::nvrtc::{Target, Toolchain};
use std::process::ExitCode;

fn main() -> ExitCode {
    let tc = match Toolchain::find() {
        Ok(tc) => tc,
        Err(e) => {
            eprintln!("no NVRTC: {e}");
            return ExitCode::FAILURE;
        }
    };
    let names: Vec<String> = std::env::args().skip(1).collect();
    let archs: Vec<String> = std::env::var("FERROLM_COMPILE_ARCHS")
        .unwrap_or_else(|_| "sm_90a,sm_80".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let verbose = std::env::var("FERROLM_PTXAS_VERBOSE").is_ok_and(|v| v == "1");
    let extra: Vec<&str> = if verbose {
        vec!["--ptxas-options=-v"]
    } else {
        vec![]
    };
    let mut failed = false;
    for name in &names {
        let Some(file) = FILES.iter().find(|f| f.name == name.as_str()) else {
            eprintln!("{name}: not a kernel file");
            failed = true;
            continue;
        };
        for arch in &archs {
            let t = std::time::Instant::now();
            match tc.compile_with_options(file, &Target::new(arch), &extra) {
                Ok((cubin, log)) => {
                    println!(
                        "{name} {arch}: {} bytes in {:.1} s{}{log}",
                        cubin.len(),
                        t.elapsed().as_secs_f64(),
                        if log.is_empty() { "" } else { "\n" }
                    );
                    if let Some(dir) = std::env::var_os("FERROLM_CUBIN_DIR") {
                        let stem = name.trim_end_matches(".cu");
                        let path = std::path::Path::new(&dir).join(format!("{stem}.{arch}.cubin"));
                        let written = std::fs::create_dir_all(&dir)
                            .and_then(|()| std::fs::write(&path, &cubin));
                        if let Err(e) = written {
                            println!("{}: {e}", path.display());
                            failed = true;
                        }
                    }
                }
                Err(e) => {
                    println!("{name} {arch}: {e}");
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
