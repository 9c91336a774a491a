//! CUDA for ferrolm: kernels written in `.cu` files (`kernels/`), embedded as cubins compiled at
//! build time for the common architectures, or compiled at run time by NVRTC for the device's
//! own architecture, and the device plumbing they need.
//!
//! Nothing here links against CUDA: cudarc opens the driver (`libcuda.so.1`) and NVRTC
//! (`libnvrtc.so.13`) with `dlopen` when they are first needed (`libs`), so the binary builds
//! and runs on machines without CUDA, and asking for a GPU there is an ordinary error.
//!
//! Layers, bottom up:
//! - `libs`: finding the driver, NVRTC and the CUDA headers (`cuda_fp16.h`).
//! - [`kernels`]: the kernel sources, embedded with `include_str!`.
//! - [`nvrtc`]: compiling one kernel file for one target (cubin, or PTX for newer GPUs than
//!   NVRTC knows); errors name the file and line.
//! - `cache`: compiled images on disk, keyed by source hash, target and NVRTC version.
//! - `aot`: the images `build.rs` compiled ahead of time (sm_80, sm_86, sm_89, sm_90a when
//!   the build machine has NVRTC), used without NVRTC when one fits the device.
//! - `device`: one GPU ([`CudaDevice`]), its stream, buffers, and modules loaded on first use.
//! - `host_logits`: a pass's logits on the host ([`HostLogits`]: a page-locked buffer kept
//!   from pass to pass, or pageable).
//! - [`ops`]: one thin launcher per kernel family, shaped like the CPU backend's functions.
//! - [`plan`]: every kernel choice (switches, thresholds, tiles, orders) in one value, built
//!   once from the device and the environment; the launchers take its answers.
//! - `backend`: the model's `Backend` ops on those launchers ([`CudaBackend`]), and
//!   [`CudaModel`], which runs the forward pass with decode steps replayed as CUDA graphs.
//!
//! Public surface: what the engine needs ([`CudaDevice`], [`CudaModel`], [`CudaCache`],
//! [`KvFormat`], [`HostLogits`]), the CLI's `bench` ([`profile`]), and the kernel-check surface:
//! [`ops`], [`Kernels`] and [`plan`] for `ferrolm-cuda-checks` (`ferrolm cuda-parity`),
//! [`kernels`] and [`nvrtc`] for the compile test (`tests/compile_kernels.rs`). The rest is
//! private; `build.rs` includes `cache`, `error`, `kernels`, `libs` and `nvrtc` by path.

mod aot;
mod backend;
mod cache;
mod device;
mod error;
mod host_logits;
pub mod kernels;
mod libs;
pub mod nvrtc;
pub mod ops;
pub mod plan;
pub mod profile;

pub use backend::{CudaBackend, CudaCache, CudaModel, CudaSplit, CudaSplitModel, SplitCudaCache};
pub use cache::dir as kernel_cache_dir;
pub use cudarc::driver::{CudaSlice, CudaStream};
pub use device::{CudaDevice, ModuleOrigin};
pub use error::{CudaError, Result};
pub use host_logits::HostLogits;
pub use libs::ensure_nccl;
pub use ops::{Kernels, KvFormat};
pub use plan::Plan;
