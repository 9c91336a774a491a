//! Kernel launches. Every launcher builds its launch here, so how a kernel starts is decided in
//! one place: with programmatic dependent launch (PDL, sm_90+) the next kernel's blocks are
//! scheduled while the one before finishes, and wait in `dependent_launch_entry()`
//! (`kernels/common.cuh`) until its writes are visible. That hides most of the gap between
//! two kernels of a decode step (about a microsecond each, 200-400 kernels a token).
//!
//! Every kernel calls `dependent_launch_entry()` before it touches global memory, or only model
//! weights, which no kernel writes, before it (checked by
//! `every_kernel_waits_for_the_one_before` below), so a chain of overlapped kernels still runs
//! in stream order.

use cudarc::driver::{
    sys, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DriverError, LaunchConfig,
};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::{Arc, LazyLock, Mutex};

/// How kernels start; the plan's [`crate::plan::Plan::launch_mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchMode {
    /// Programmatic dependent launch: a kernel's blocks may be scheduled before the kernel
    /// ahead of it has finished.
    pub dependent: bool,
    /// Mat-vec kernels ask L2 for their weight rows before they wait (only useful when
    /// `dependent`: otherwise there is nothing to overlap).
    pub weight_prefetch: bool,
    /// That prefetch into the asking SM's L1 rather than L2 (the block that asks is the one
    /// that reads them).
    pub weight_prefetch_l1: bool,
    /// The most weight bytes a mat-vec prefetches (0: any; the plan's
    /// `FERROLM_CUDA_PREFETCH_MAX_MB`).
    pub weight_prefetch_max: usize,
    /// Wide mat-vec walks (dense and MoE) read their activations from a copy in shared memory
    /// (`stage_q8_1`, kernels/mmvq.cuh) where it fits: the same bits.
    pub stage_activations: bool,
    /// Per-head q/k norms and their NEOX rotation with the normed values kept in registers
    /// (`qk_norm_head_rope_neox_f32`) where a head's pairs sit in one thread: the same bits.
    pub head_norm_regs: bool,
    /// The fused norm's rows of exactly 2, 4 or 8 elements a thread without the guarded
    /// register iterations, and its Q8_K pass from shared memory (`add_rms_norm_exact`): the
    /// same bits.
    pub norm_exact: bool,
    /// Every kernel's preferred shared-memory carveout (percent), set on its first launch;
    /// `None`: the driver's choice a kernel.
    pub carveout: Option<i32>,
    /// Kernels left out of the step, by name prefix: for timing what a kernel costs the chain
    /// of launches; the outputs are wrong (the plan's `FERROLM_TIMING_SKIP`).
    pub skip: &'static [String],
}

impl LaunchMode {
    /// The mat-vec kernels' `prefetch` argument: 0 none, 1 L2, 2 L1 (mmvq.cuh's
    /// weights_to_l2_then_wait).
    pub fn prefetch_arg(&self) -> i32 {
        match (self.weight_prefetch, self.weight_prefetch_l1) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        }
    }

    /// That argument for a product whose weights are `bytes` long (none past
    /// `weight_prefetch_max`).
    pub fn prefetch_arg_for(&self, bytes: usize) -> i32 {
        if self.weight_prefetch_max > 0 && bytes > self.weight_prefetch_max {
            0
        } else {
            self.prefetch_arg()
        }
    }
}

/// Kernel names by function handle, recorded as functions load, for [`LaunchMode::skip`].
static NAMES: LazyLock<Mutex<HashMap<usize, String>>> = LazyLock::new(Mutex::default);

/// Records `func`'s name (`device.rs`, as it loads a function).
pub(crate) fn name_function(func: &CudaFunction, name: &str) {
    NAMES
        .lock()
        .expect("kernel names poisoned")
        .insert(func.cu_function() as usize, name.to_owned());
}

/// Whether a kernel of this name is left out under `skip`.
fn skipped(skip: &[String], name: &str) -> bool {
    skip.iter().any(|s| name.starts_with(s.as_str()))
}

/// A stream, and how launches on it start.
#[derive(Clone)]
pub struct Launcher {
    stream: Arc<CudaStream>,
    mode: LaunchMode,
    /// The functions whose carveout is set (only with `mode.carveout`).
    carved: Arc<Mutex<HashSet<usize>>>,
}

impl Launcher {
    pub fn new(stream: Arc<CudaStream>, mode: LaunchMode) -> Self {
        Self {
            stream,
            mode,
            carved: Arc::default(),
        }
    }

    /// Sets `func`'s preferred carveout the first time it is launched, where the mode asks.
    fn carve(&self, func: &CudaFunction) -> Result<(), DriverError> {
        let Some(percent) = self.mode.carveout else {
            return Ok(());
        };
        let f = func.cu_function();
        if self
            .carved
            .lock()
            .expect("carveout set poisoned")
            .insert(f as usize)
        {
            let attr =
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
            // SAFETY: a loaded function of this context, and an attribute it takes.
            unsafe { sys::cuFuncSetAttribute(f, attr, percent) }.result()?;
        }
        Ok(())
    }

    pub fn mode(&self) -> LaunchMode {
        self.mode
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A launch of `func`; push its arguments in the kernel's parameter order.
    pub fn builder<'a>(&'a self, func: &'a CudaFunction) -> Launch<'a> {
        Launch {
            launcher: self,
            func,
            args: Vec::with_capacity(16),
            cluster: None,
        }
    }
}

/// One kernel argument: a device address (kept by value here) or a host value the caller keeps
/// alive until the launch.
pub enum Arg<'a> {
    Device(sys::CUdeviceptr),
    Value(*const c_void, PhantomData<&'a ()>),
}

/// What may be passed to a kernel: device buffers (by address) and plain scalars.
pub trait KernelArg<'a> {
    fn to_arg(self, stream: &CudaStream) -> Arg<'a>;
}

impl<'a, T> KernelArg<'a> for &'a CudaSlice<T> {
    fn to_arg(self, stream: &CudaStream) -> Arg<'a> {
        Arg::Device(self.device_ptr(stream).0)
    }
}

/// An optional buffer: its address, or a null pointer for `None`.
impl<'a, T> KernelArg<'a> for Option<&'a CudaSlice<T>> {
    fn to_arg(self, stream: &CudaStream) -> Arg<'a> {
        self.map_or(Arg::Device(0), |s| s.to_arg(stream))
    }
}

impl<'a, T> KernelArg<'a> for &'a mut CudaSlice<T> {
    fn to_arg(self, stream: &CudaStream) -> Arg<'a> {
        Arg::Device(self.device_ptr_mut(stream).0)
    }
}

impl<'a, T> KernelArg<'a> for &'a CudaView<'_, T> {
    fn to_arg(self, stream: &CudaStream) -> Arg<'a> {
        Arg::Device(self.device_ptr(stream).0)
    }
}

impl<'a, T> KernelArg<'a> for &'a mut CudaViewMut<'_, T> {
    fn to_arg(self, stream: &CudaStream) -> Arg<'a> {
        Arg::Device(self.device_ptr_mut(stream).0)
    }
}

macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl<'a> KernelArg<'a> for &'a $t {
            fn to_arg(self, _: &CudaStream) -> Arg<'a> {
                Arg::Value(self as *const $t as *const c_void, PhantomData)
            }
        }
    )*};
}
scalar_args!(i32, u32, i64, u64, f32, f64);
// A struct by value, laid out as the kernels' (common.cuh's KvPages).
scalar_args!(super::kv_cache::KvPagesArg);
// A tensor map by value (gemm_wgmma.cu's TmaMap).
scalar_args!(super::gemm_wgmma::TmaMapArg);
// The f16 mat-vec's matrices by value (matvec_f16.cu's MvfMats).
scalar_args!(super::matvec_f16::MvfMatsArg);

/// A launch being built; see [`Launcher::builder`].
pub struct Launch<'a> {
    launcher: &'a Launcher,
    func: &'a CudaFunction,
    args: Vec<Arg<'a>>,
    /// Blocks of a thread-block cluster along x and y (sm_90), where the kernel takes one.
    cluster: Option<(u32, u32)>,
}

impl<'a> Launch<'a> {
    /// Launches the grid as clusters of `blocks` blocks along x (the grid's x a multiple).
    pub fn cluster(&mut self, blocks: u32) -> &mut Self {
        self.cluster = Some((blocks, 1));
        self
    }

    /// Launches the grid as clusters of `blocks` blocks along y (the grid's y a multiple).
    pub fn cluster_along_y(&mut self, blocks: u32) -> &mut Self {
        self.cluster = Some((1, blocks));
        self
    }

    pub fn arg(&mut self, a: impl KernelArg<'a>) -> &mut Self {
        let arg = a.to_arg(&self.launcher.stream);
        self.args.push(arg);
        self
    }

    /// Enqueues the kernel on the launcher's stream (captured into a graph when one is being
    /// captured).
    ///
    /// # Safety
    /// The arguments must be the kernel's parameters, in order, with the types it declares, and
    /// the kernel must stay within the buffers it is given.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        let skip = self.launcher.mode.skip;
        if !skip.is_empty() {
            let names = NAMES.lock().expect("kernel names poisoned");
            let name = names.get(&(self.func.cu_function() as usize));
            if name.is_some_and(|n| skipped(skip, n)) {
                return Ok(());
            }
        }
        let stream = &self.launcher.stream;
        stream.context().bind_to_thread()?;
        self.launcher.carve(self.func)?;
        // Device addresses are passed by reference too: keep them in place while the driver
        // reads the parameter list.
        let addresses: Vec<sys::CUdeviceptr> = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Device(p) => *p,
                Arg::Value(..) => 0,
            })
            .collect();
        let mut params: Vec<*mut c_void> = self
            .args
            .iter()
            .zip(&addresses)
            .map(|(a, p)| match a {
                Arg::Device(_) => p as *const sys::CUdeviceptr as *mut c_void,
                Arg::Value(v, _) => *v as *mut c_void,
            })
            .collect();
        let mut attrs = Vec::with_capacity(2);
        if self.launcher.mode.dependent {
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: std::mem::zeroed(),
            };
            attr.value.programmaticStreamSerializationAllowed = 1;
            attrs.push(attr);
        }
        if let Some((x, y)) = self.cluster {
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                pad: [0; 4],
                value: std::mem::zeroed(),
            };
            attr.value.clusterDim.x = x;
            attr.value.clusterDim.y = y;
            attr.value.clusterDim.z = 1;
            attrs.push(attr);
        }
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        // SAFETY: the caller vouches for the parameters; `params`, `addresses` and `attrs`
        // outlive the call, which copies them.
        sys::cuLaunchKernelEx(
            &config,
            self.func.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
        .result()
    }
}

#[cfg(test)]
mod tests {
    /// A skip entry is a name prefix: `moe_down` takes every down kernel, and no other.
    #[test]
    fn skip_matches_name_prefixes() {
        let skip = ["moe_down".to_owned(), "quantize_q8_k".to_owned()];
        assert!(super::skipped(&skip, "moe_down_q6_k_n1"));
        assert!(super::skipped(&skip, "quantize_q8_k"));
        assert!(!super::skipped(&skip, "quantize_q8_1"));
        assert!(!super::skipped(&skip, "moe_gate_up_q4_k_n1"));
        assert!(!super::skipped(&[], "moe_down_q6_k_n1"));
    }

    /// Every `__global__` kernel starts with `dependent_launch_entry();` (or a `*_then_wait`
    /// helper, which only touches read-only weights before it waits, or
    /// `dependent_launch_wait_only();`, whose kernel lets the next one in later): a
    /// kernel that read memory before it could see the previous kernel's output half written.
    #[test]
    fn every_kernel_waits_for_the_one_before() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
        let mut kernels = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let src = std::fs::read_to_string(&path).unwrap();
            let mut rest = src.as_str();
            while let Some(at) = rest.find("__global__") {
                rest = &rest[at + "__global__".len()..];
                // The body starts at the first `{` after the parameter list.
                let open = rest.find('{').unwrap();
                let body =
                    rest[open + 1..].trim_start_matches(|c: char| c.is_whitespace() || c == '\\');
                let name: String = rest[..open].chars().take(80).collect();
                // Or a `*_then_wait` helper that reads only model weights before it waits.
                let first = &body[..body.find(';').unwrap()];
                assert!(
                    first == "dependent_launch_entry()"
                        || first == "dependent_launch_wait_only()"
                        || first.contains("_then_wait"),
                    "{}: kernel `{}` does not start with dependent_launch_entry();",
                    path.display(),
                    name.trim()
                );
                kernels += 1;
            }
        }
        assert!(kernels > 30, "found only {kernels} kernels");
    }
}
