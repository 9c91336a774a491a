//! One GPU: its context, the stream every op runs on, buffers, and kernel modules loaded the
//! first time a file's function is asked for: the image embedded at build time when there is
//! one for this device ([`aot`]), else compiled by NVRTC (or taken from the disk cache).

use crate::aot;
use crate::cache;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::KernelFile;
use crate::libs;
use crate::nvrtc::{Target, Toolchain};
use cudarc::driver::{
    sys, sys::CUfunction_attribute, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream,
    DeviceRepr, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The oldest driver API the kernels and cudarc's CUDA 13.0 bindings are used with.
const MIN_DRIVER: i32 = 12000;

pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    driver_version: i32,
    /// NVRTC, found when first needed: at once when the embedded images do not cover this
    /// device, else never (a machine with only the driver).
    toolchain: OnceLock<Toolchain>,
    target: Target,
    /// Embedded images may be used (built with them, `FERROLM_CUDA_AOT` not 0, driver new enough).
    use_aot: bool,
    modules: Mutex<HashMap<&'static str, (Arc<CudaModule>, ModuleOrigin)>>,
}

/// Where a loaded module's image came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleOrigin {
    /// Embedded at build time (`aot`).
    Embedded,
    /// Compiled by NVRTC here, or taken from the disk cache.
    Compiled,
}

impl CudaDevice {
    /// GPUs the driver sees; 0 without a driver.
    pub fn count() -> usize {
        if !libs::driver_present() {
            return 0;
        }
        let n = cudarc::driver::result::init()
            .and_then(|()| cudarc::driver::result::device::get_count());
        n.map_or(0, |n| n.max(0) as usize)
    }

    /// Opens device `ordinal`. Each way this can fail (no driver, no device, a driver too old,
    /// no NVRTC or headers when no embedded images fit) is its own error, worded for the user.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !libs::driver_present() {
            return Err(CudaError::NoDriver(
                "libcuda.so.1 could not be loaded (is the NVIDIA driver installed?)".into(),
            ));
        }
        let mut driver_version = 0;
        // SAFETY: out-parameter; valid before cuInit.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .during("cuDriverGetVersion")?;
        if driver_version < MIN_DRIVER {
            return Err(CudaError::DriverTooOld {
                found: version_string(driver_version),
                needed: version_string(MIN_DRIVER),
            });
        }
        let count = match cudarc::driver::result::init()
            .and_then(|()| cudarc::driver::result::device::get_count())
        {
            Ok(n) => n,
            Err(e) => return Err(CudaError::NoDevice(format!("cuInit failed: {e}"))),
        };
        if ordinal >= count.max(0) as usize {
            return Err(CudaError::NoDevice(format!(
                "device {ordinal} asked for, {count} present"
            )));
        }
        let ctx = CudaContext::new(ordinal).during("creating the context")?;
        // One stream and no cross-stream hazards to track: cudarc's per-buffer events would
        // only add work to every launch (and get in the way of graph capture later).
        // SAFETY: every buffer of this device is used on `stream` alone.
        unsafe { ctx.disable_event_tracking() };
        // A stream of our own rather than the legacy default one, which graphs cannot capture.
        let stream = ctx.new_stream().during("creating a stream")?;
        let name = ctx.name().during("reading the device name")?;
        let cc = ctx
            .compute_capability()
            .during("reading the compute capability")?;
        let use_aot = aot::usable(driver_version);
        let toolchain = OnceLock::new();
        // Every file embedded for this GPU: NVRTC is not needed, and not looked for.
        let target = match aot::target_without_nvrtc(cc, driver_version) {
            Some(target) => target,
            None => {
                let native = Target::native(cc);
                let tc = Toolchain::find().map_err(|e| no_compiler(e, &native, use_aot))?;
                let target = Target::for_device(cc, &tc.supported_archs()?)?;
                let _ = toolchain.set(tc);
                target
            }
        };
        Ok(Self {
            ctx,
            stream,
            name,
            cc,
            driver_version,
            toolchain,
            target,
            use_aot,
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// One line for logs: "NVIDIA H200 (cc 9.0, 139.8 GiB, driver CUDA 13.0, kernels AOT
    /// sm_90a)", or "… kernels NVRTC 13.0 sm_90a" when they are compiled here.
    pub fn describe(&self) -> String {
        let mem = self.ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
        format!(
            "{} (cc {}.{}, {mem:.1} GiB, driver CUDA {}, kernels {})",
            self.name,
            self.cc.0,
            self.cc.1,
            version_string(self.driver_version),
            self.kernel_path()
        )
    }

    /// Where kernels come from: "AOT sm_90a" (all embedded), "NVRTC 13.0 sm_90a", or
    /// "NVRTC 13.0 sm_90a, AOT for some files" (an image for some files only).
    pub fn kernel_path(&self) -> String {
        let arch = &self.target.arch;
        let embedded = |f| self.use_aot && aot::image(f, &self.target).is_some();
        // `new` finds NVRTC exactly when the embedded images do not cover the device.
        match self.toolchain.get() {
            Some(tc) if !self.all_embedded() => {
                let (major, minor) = tc.version;
                let some = crate::kernels::FILES.iter().any(embedded);
                let note = if some { ", AOT for some files" } else { "" };
                format!("NVRTC {major}.{minor} {arch}{note}")
            }
            _ => format!("AOT {arch}"),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// The device's streaming multiprocessors.
    pub fn sm_count(&self) -> Result<usize> {
        let n = self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .during("reading the SM count")?;
        Ok(n as usize)
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Function `name` of kernel file `file`, compiling and loading the file on first use.
    pub fn function(&self, file: &'static KernelFile, name: &str) -> Result<CudaFunction> {
        let module = self.module(file)?;
        let func = module
            .load_function(name)
            .during(format!("loading kernel {name} from {}", file.name))?;
        crate::ops::launch::name_function(&func, name);
        Ok(func)
    }

    /// [`Self::function`] allowed `bytes` of dynamic shared memory a block: past 48 KiB a
    /// block gets it only when the function asks for it.
    pub fn function_with_smem(
        &self,
        file: &'static KernelFile,
        name: &str,
        bytes: usize,
    ) -> Result<CudaFunction> {
        let f = self.function(file, name)?;
        let bytes = i32::try_from(bytes)
            .map_err(|_| CudaError::Invalid(format!("{name}: {bytes} bytes of shared memory")))?;
        self.ctx.bind_to_thread().during("binding the context")?;
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes,
        )
        .during(format!("allowing {name} {bytes} bytes of shared memory"))?;
        Ok(f)
    }

    fn module(&self, file: &'static KernelFile) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().expect("module map poisoned");
        if let Some((m, _)) = modules.get(file.name) {
            return Ok(m.clone());
        }
        let embedded = self
            .use_aot
            .then(|| aot::image(file, &self.target))
            .flatten();
        let (module, origin) = match embedded {
            Some(image) => match self.ctx.load_module(Ptx::from_binary(image.bytes())) {
                Ok(m) => (m, ModuleOrigin::Embedded),
                // Refused by this driver: NVRTC may still do, and if not, the driver's
                // reason is the one worth reading.
                Err(e) => {
                    let m = self.compiled_module(file).map_err(|_| CudaError::Driver {
                        what: format!(
                            "loading the embedded {} image of {}",
                            self.target.arch, file.name
                        ),
                        source: e,
                    })?;
                    (m, ModuleOrigin::Compiled)
                }
            },
            None => (self.compiled_module(file)?, ModuleOrigin::Compiled),
        };
        modules.insert(file.name, (module.clone(), origin));
        Ok(module)
    }

    /// The files loaded so far and where each image came from, sorted by file name.
    pub fn loaded_modules(&self) -> Vec<(&'static str, ModuleOrigin)> {
        let modules = self.modules.lock().expect("module map poisoned");
        let mut list: Vec<_> = modules.iter().map(|(&f, &(_, o))| (f, o)).collect();
        list.sort_unstable_by_key(|&(f, _)| f);
        list
    }

    /// Whether every kernel file should load from an embedded image (then NVRTC was not
    /// looked for); a file compiled instead means the driver refused its image.
    pub fn all_embedded(&self) -> bool {
        self.use_aot && aot::covers(&self.target)
    }

    /// NVRTC, found on first use when [`new`](Self::new) did not need it.
    fn toolchain(&self) -> Result<&Toolchain> {
        if let Some(tc) = self.toolchain.get() {
            return Ok(tc);
        }
        let tc = Toolchain::find()?;
        Ok(self.toolchain.get_or_init(|| tc))
    }

    /// `file` compiled by NVRTC through the disk cache, and loaded.
    fn compiled_module(&self, file: &KernelFile) -> Result<Arc<CudaModule>> {
        let tc = self.toolchain()?;
        let image = cache::compile(tc, file, &self.target)?;
        match self.ctx.load_module(Ptx::from_binary(image)) {
            Ok(m) => Ok(m),
            // A cached image the driver refuses (truncated, or from a driver update): once
            // more from source before giving up.
            Err(_) => {
                cache::evict(tc, file, &self.target);
                let image = tc.compile(file, &self.target)?;
                let module = self
                    .ctx
                    .load_module(Ptx::from_binary(image.clone()))
                    .during(format!("loading module {}", file.name))?;
                cache::store(&cache::key(tc, file, &self.target), &image);
                Ok(module)
            }
        }
    }

    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(host)
            .during(format!("copying {} bytes to the device", size_of_val(host)))
    }

    /// `host` followed by `pad` zeroed elements.
    pub fn upload_padded<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        host: &[T],
        pad: usize,
    ) -> Result<CudaSlice<T>> {
        let mut dev = self.zeros::<T>(host.len() + pad)?;
        self.stream
            .memcpy_htod(host, &mut dev.slice_mut(..host.len()))
            .during(format!("copying {} bytes to the device", size_of_val(host)))?;
        Ok(dev)
    }

    pub fn download<T: DeviceRepr + Default + Clone>(&self, dev: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(dev)
            .during("copying from the device")
    }

    /// The first `n` elements of `dev` (fewer where it is shorter).
    pub fn download_prefix<T: DeviceRepr + Default + Clone>(
        &self,
        dev: &CudaSlice<T>,
        n: usize,
    ) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(&dev.slice(..n.min(dev.len())))
            .during("copying from the device")
    }

    /// `n` zeroed elements. Out of memory is an error, never an abort.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(n)
            .during(format!("allocating {} bytes", n * std::mem::size_of::<T>()))
    }

    /// Device time of the work `queue` puts on the stream, in ms, from events recorded around
    /// it (host time would count launch overhead and miss queued work).
    pub fn time_ms(&self, queue: impl FnOnce() -> Result<()>) -> Result<f64> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(flags).during("creating an event")?;
        let end = self.ctx.new_event(flags).during("creating an event")?;
        start.record(&self.stream).during("recording an event")?;
        queue()?;
        end.record(&self.stream).during("recording an event")?;
        self.sync()?;
        Ok(f64::from(
            start.elapsed_ms(&end).during("reading an event")?,
        ))
    }

    /// Waits for all queued work; kernel faults surface here.
    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize().during("synchronizing the stream")
    }
}

/// NVRTC is missing and the embedded images do not cover `native`: say both.
fn no_compiler(err: CudaError, native: &Target, use_aot: bool) -> CudaError {
    let why = match (aot::BUILT_WITH, use_aot) {
        (None, _) => "this binary was built without them".to_string(),
        (Some(_), false) => {
            "they are turned off (FERROLM_CUDA_AOT=0) or need a newer driver".into()
        }
        (Some(_), true) => format!("it has them for {} only", aot::embedded_archs()),
    };
    CudaError::NoKernels {
        target: native.arch.clone(),
        why,
        compiler: Box::new(err),
    }
}

/// 13000 -> "13.0".
fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}
