//! One error type for everything CUDA; each variant says what a user can do about it.

use cudarc::driver::DriverError;

pub type Result<T, E = CudaError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no NVIDIA driver: {0}")]
    NoDriver(String),
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    #[error("the NVIDIA driver supports CUDA {found}; ferrolm needs {needed} or newer")]
    DriverTooOld { found: String, needed: String },
    #[error(
        "NVRTC (CUDA's run-time compiler, libnvrtc.so.13) not found; searched: {searched}. \
         Install the CUDA 13 toolkit or `pip install nvidia-cuda-nvrtc`, or set FERROLM_NVRTC \
         to the library file"
    )]
    NoNvrtc { searched: String },
    #[error(
        "CUDA headers (cuda_fp16.h) not found; searched: {searched}. Install the CUDA toolkit \
         or `pip install nvidia-cuda-runtime`, or set FERROLM_CUDA_INCLUDE"
    )]
    NoHeaders { searched: String },
    /// A kernel failed to compile: `location` is `kernels/FILE:LINE` of the first error.
    #[error("compiling crates/cuda/kernels/{file} for {target}: {location}: {message}")]
    Compile {
        file: String,
        target: String,
        location: String,
        message: String,
        /// NVRTC's whole log.
        log: String,
    },
    /// No embedded kernel images fit the device, and compiling them failed to start (`compiler`:
    /// NVRTC or the headers missing).
    #[error(
        "no embedded CUDA kernels for {target} ({why}), so they must be compiled here: {compiler}"
    )]
    NoKernels {
        target: String,
        why: String,
        compiler: Box<CudaError>,
    },
    /// NCCL, which a split over several GPUs sums through, cannot be opened (`found`: where
    /// a copy under a name cudarc does not open was seen, if anywhere).
    #[error(
        "NCCL (libnccl.so) could not be loaded{found}; a split over several GPUs needs it. \
         Install NCCL (`libnccl-dev`, or `pip install nvidia-nccl-cu13` and a `libnccl.so` \
         link to its `libnccl.so.2`) with its folder on LD_LIBRARY_PATH, or use \
         `--split-mode layer`"
    )]
    NoNccl { found: String },
    #[error("NCCL {call}: {message}")]
    Nccl { call: &'static str, message: String },
    #[error("NVRTC {call}: {message}")]
    Nvrtc { call: &'static str, message: String },
    #[error("CUDA {what}: {source}")]
    Driver {
        what: String,
        #[source]
        source: DriverError,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Attaches what was being done to a driver error.
pub(crate) trait DriverContext<T> {
    fn during(self, what: impl Into<String>) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn during(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|source| CudaError::Driver {
            what: what.into(),
            source,
        })
    }
}
