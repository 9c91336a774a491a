//! Compiling one kernel file with NVRTC, through cudarc's raw bindings (its safe wrapper yields
//! PTX only and takes no in-memory headers; we want cubins and embedded headers).

use crate::error::{CudaError, Result};
use crate::kernels::{KernelFile, HEADERS};
use crate::libs;
use cudarc::nvrtc::sys;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;

/// What to compile for: `sm_XY[a]` gives a cubin for exactly that GPU; `compute_XY` gives PTX,
/// which the driver compiles for a newer GPU than this NVRTC knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub arch: String,
}

impl Target {
    pub fn new(arch: impl Into<String>) -> Self {
        Self { arch: arch.into() }
    }

    pub fn is_ptx(&self) -> bool {
        self.arch.starts_with("compute_")
    }

    /// The cubin target of a device of compute capability `cc`: what
    /// [`for_device`](Self::for_device) picks when NVRTC knows the architecture, and what
    /// ahead-of-time images are looked up by when there is no NVRTC to ask.
    pub fn native(cc: (i32, i32)) -> Self {
        let code = cc.0 * 10 + cc.1;
        let suffix = if code == 90 { "a" } else { "" };
        Self::new(format!("sm_{code}{suffix}"))
    }

    /// The target for a device of compute capability `cc`, given the `sm` numbers this NVRTC
    /// supports (`nvrtcGetSupportedArchs`). Hopper (9.0) gets `sm_90a`, so kernels may use its
    /// arch-specific instructions (wgmma, setmaxnreg); other GPUs get their own `sm_XY`.
    pub fn for_device(cc: (i32, i32), supported: &[i32]) -> Result<Self> {
        let code = cc.0 * 10 + cc.1;
        if supported.contains(&code) {
            return Ok(Self::native(cc));
        }
        // A GPU this NVRTC does not know (newer, or between two it knows): PTX for the newest
        // architecture below it, which the driver compiles for the device.
        match supported.iter().copied().filter(|&s| s < code).max() {
            Some(best) => Ok(Self::new(format!("compute_{best}"))),
            None => Err(CudaError::NoDevice(format!(
                "compute capability {}.{} is older than this NVRTC supports (sm {:?})",
                cc.0, cc.1, supported
            ))),
        }
    }
}

/// A loaded NVRTC plus the headers folder: everything needed to compile.
#[derive(Clone, Debug)]
pub struct Toolchain {
    pub version: (i32, i32),
    pub include_dir: PathBuf,
    /// Where NVRTC came from ("system" or a folder), for messages.
    pub origin: &'static str,
}

impl Toolchain {
    pub fn find() -> Result<Self> {
        let origin = libs::ensure_nvrtc()?;
        let include_dir = libs::include_dir()?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: plain out-parameters.
        check("nvrtcVersion", unsafe {
            sys::nvrtcVersion(&mut major, &mut minor)
        })?;
        Ok(Self {
            version: (major, minor),
            include_dir,
            origin,
        })
    }

    /// The `sm` numbers this NVRTC can emit cubins for.
    pub fn supported_archs(&self) -> Result<Vec<i32>> {
        let mut n: c_int = 0;
        // SAFETY: out-parameter, then a buffer of the size it reported.
        check("nvrtcGetNumSupportedArchs", unsafe {
            sys::nvrtcGetNumSupportedArchs(&mut n)
        })?;
        let mut archs = vec![0 as c_int; n.max(0) as usize];
        check("nvrtcGetSupportedArchs", unsafe {
            sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
        })?;
        Ok(archs)
    }

    /// The options every file is compiled with. NVRTC's defaults already give IEEE division
    /// and square root and no flush-to-zero, which the parity contracts rely on; `-lineinfo`
    /// lets profilers map time to source lines at no run-time cost.
    pub fn options(&self, target: &Target) -> Vec<String> {
        vec![
            format!("--gpu-architecture={}", target.arch),
            "--std=c++17".into(),
            "-lineinfo".into(),
            format!("--include-path={}", self.include_dir.display()),
        ]
    }

    /// Compiles `file` for `target`: a cubin, or PTX for a `compute_` target.
    pub fn compile(&self, file: &KernelFile, target: &Target) -> Result<Vec<u8>> {
        self.compile_with_log(file, target).map(|(image, _)| image)
    }

    /// [`compile`](Self::compile), also returning NVRTC's log (its warnings, on success).
    pub fn compile_with_log(
        &self,
        file: &KernelFile,
        target: &Target,
    ) -> Result<(Vec<u8>, String)> {
        self.compile_with_options(file, target, &[])
    }

    /// [`compile_with_log`](Self::compile_with_log) with `extra` options after the usual
    /// ones (the `compile_one` example's `--ptxas-options=-v`: each kernel's registers and
    /// spills in the log).
    pub fn compile_with_options(
        &self,
        file: &KernelFile,
        target: &Target,
        extra: &[&str],
    ) -> Result<(Vec<u8>, String)> {
        let cstr = |s: &str| CString::new(s).expect("kernel sources hold no NUL");
        let src = cstr(file.source);
        let name = cstr(file.name);
        let header_src: Vec<CString> = HEADERS.iter().map(|h| cstr(h.source)).collect();
        let header_names: Vec<CString> = HEADERS.iter().map(|h| cstr(h.name)).collect();
        let src_ptrs: Vec<*const c_char> = header_src.iter().map(|s| s.as_ptr()).collect();
        let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
        let options: Vec<CString> = (self.options(target).iter().map(String::as_str))
            .chain(extra.iter().copied())
            .map(cstr)
            .collect();
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: every pointer refers to a CString that outlives the program.
        check("nvrtcCreateProgram", unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                HEADERS.len() as c_int,
                src_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        })?;
        let prog = Program(prog);
        // SAFETY: a live program and options that outlive the call.
        let status = unsafe {
            sys::nvrtcCompileProgram(prog.0, option_ptrs.len() as c_int, option_ptrs.as_ptr())
        };
        let log = prog.log().unwrap_or_default();
        if status != sys::nvrtcResult::NVRTC_SUCCESS {
            let (location, message) = first_error(&log, file.name);
            return Err(CudaError::Compile {
                file: file.name.into(),
                target: target.arch.clone(),
                location,
                message,
                log,
            });
        }
        let (size_fn, get_fn): (SizeFn, GetFn) = if target.is_ptx() {
            (sys::nvrtcGetPTXSize, sys::nvrtcGetPTX)
        } else {
            (sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN)
        };
        let mut size = 0usize;
        // SAFETY: size query, then a buffer of that size.
        check("get image size", unsafe { size_fn(prog.0, &mut size) })?;
        let mut image = vec![0u8; size];
        check("get image", unsafe {
            get_fn(prog.0, image.as_mut_ptr().cast())
        })?;
        Ok((image, log))
    }
}

type SizeFn = unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult;
type GetFn = unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult;

/// Owns an nvrtcProgram; destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Program {
    fn log(&self) -> Result<String> {
        let mut size = 0usize;
        // SAFETY: size query, then a buffer of that size.
        check("nvrtcGetProgramLogSize", unsafe {
            sys::nvrtcGetProgramLogSize(self.0, &mut size)
        })?;
        let mut buf = vec![0u8; size.max(1)];
        check("nvrtcGetProgramLog", unsafe {
            sys::nvrtcGetProgramLog(self.0, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed once.
        unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn check(call: &'static str, status: sys::nvrtcResult) -> Result<()> {
    if status == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: NVRTC returns a static string for every status.
    let message = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(status)) }
        .to_string_lossy()
        .into_owned();
    Err(CudaError::Nvrtc { call, message })
}

/// The first error of an NVRTC log as (`kernels/FILE:LINE`, message). NVRTC writes
/// `FILE(LINE): error: message`, FILE being the program's name or an included header's.
pub fn first_error(log: &str, file: &str) -> (String, String) {
    for line in log.lines() {
        let Some((head, rest)) = line.split_once("): ") else {
            continue;
        };
        if !rest.contains("error") {
            continue;
        }
        if let Some((path, lineno)) = head.rsplit_once('(') {
            if lineno.chars().all(|c| c.is_ascii_digit()) && !lineno.is_empty() {
                let name = path.rsplit('/').next().unwrap_or(path);
                return (format!("kernels/{name}:{lineno}"), rest.trim().to_string());
            }
        }
    }
    let message = log
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("NVRTC failed without a log");
    (format!("kernels/{file}"), message.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_error_names_file_and_line() {
        let log = "mmvq.cu(12): warning #177-D: variable \"x\" was declared but never referenced\n\
                   quant.cuh(40): error: identifier \"foo\" is undefined\n\
                   1 error detected in the compilation of \"mmvq.cu\".\n";
        let (loc, msg) = first_error(log, "mmvq.cu");
        assert_eq!(loc, "kernels/quant.cuh:40");
        assert_eq!(msg, "error: identifier \"foo\" is undefined");
        let (loc, msg) = first_error("nvrtc: error: invalid option\n", "a.cu");
        assert_eq!(
            (loc.as_str(), msg.as_str()),
            ("kernels/a.cu", "nvrtc: error: invalid option")
        );
    }

    #[test]
    fn targets_follow_the_device() {
        let sup = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(Target::for_device((9, 0), &sup).unwrap().arch, "sm_90a");
        assert_eq!(Target::for_device((8, 6), &sup).unwrap().arch, "sm_86");
        let newer = Target::for_device((13, 0), &sup).unwrap();
        assert_eq!(newer.arch, "compute_120");
        assert!(newer.is_ptx());
        assert!(Target::for_device((6, 1), &sup).is_err());
        assert_eq!(Target::for_device((8, 7), &sup).unwrap().arch, "compute_86");
        assert_eq!(Target::native((9, 0)).arch, "sm_90a");
        assert_eq!(Target::native((8, 9)).arch, "sm_89");
    }
}
