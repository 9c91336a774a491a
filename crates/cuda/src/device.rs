//! One GPU: its context, the stream every op runs on, buffers, and kernel modules compiled
//! (or taken from the cache) the first time a file's function is asked for.

use crate::cache;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::KernelFile;
use crate::libs;
use crate::nvrtc::{Target, Toolchain};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The oldest driver API the kernels and cudarc's CUDA 13.0 bindings are used with.
const MIN_DRIVER: i32 = 12000;

pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    driver_version: i32,
    toolchain: Toolchain,
    target: Target,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

impl CudaDevice {
    /// Opens device `ordinal`. Each way this can fail (no driver, no device, a driver too old,
    /// no NVRTC or headers) is its own error, worded for the user.
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
        let toolchain = Toolchain::find()?;
        let target = Target::for_device(cc, &toolchain.supported_archs()?)?;
        Ok(Self {
            ctx,
            stream,
            name,
            cc,
            driver_version,
            toolchain,
            target,
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// One line for logs: "NVIDIA H200 (cc 9.0, sm_90a, 139.8 GiB, driver CUDA 13.0, NVRTC 13.0)".
    pub fn describe(&self) -> String {
        let mem = self.ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
        format!(
            "{} (cc {}.{}, {}, {mem:.1} GiB, driver CUDA {}, NVRTC {}.{})",
            self.name,
            self.cc.0,
            self.cc.1,
            self.target.arch,
            version_string(self.driver_version),
            self.toolchain.version.0,
            self.toolchain.version.1
        )
    }

    pub fn name(&self) -> &str {
        &self.name
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
        module
            .load_function(name)
            .during(format!("loading kernel {name} from {}", file.name))
    }

    fn module(&self, file: &'static KernelFile) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().expect("module map poisoned");
        if let Some(m) = modules.get(file.name) {
            return Ok(m.clone());
        }
        let image = cache::compile(&self.toolchain, file, &self.target)?;
        let module = match self.ctx.load_module(Ptx::from_binary(image)) {
            Ok(m) => m,
            // A cached image the driver refuses (truncated, or from a driver update): once
            // more from source before giving up.
            Err(_) => {
                cache::evict(&self.toolchain, file, &self.target);
                let image = self.toolchain.compile(file, &self.target)?;
                let module = self
                    .ctx
                    .load_module(Ptx::from_binary(image.clone()))
                    .during(format!("loading module {}", file.name))?;
                cache::store(&cache::key(&self.toolchain, file, &self.target), &image);
                module
            }
        };
        modules.insert(file.name, module.clone());
        Ok(module)
    }

    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.stream
            .clone_htod(host)
            .during(format!("copying {} bytes to the device", size_of_val(host)))
    }

    pub fn download<T: DeviceRepr + Default + Clone>(&self, dev: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(dev)
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

/// 13000 -> "13.0".
fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}
