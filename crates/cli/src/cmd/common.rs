//! Options shared by every subcommand that runs a model.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ferrolm_engine::{KvType, Model, Session};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    Cpu,
    Cuda,
    /// CUDA when a device is present, else the CPU.
    Auto,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CacheType {
    F16,
    F32,
}

#[derive(Args, Debug, Clone)]
pub struct ModelOpts {
    /// Model file (default: the default model, pulled on first use).
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Layers to offload to the GPU (-1 or 99: all). Ignored on the CPU.
    #[arg(long = "n-gpu-layers", visible_alias = "ngl", default_value_t = -1, allow_negative_numbers = true)]
    pub n_gpu_layers: i32,
    /// CPU threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// KV cache element type: f16 (llama.cpp's default) or f32 (exact).
    #[arg(long = "cache-type", visible_alias = "ctk", value_enum, default_value_t = CacheType::F16)]
    pub cache_type: CacheType,
    /// Context size in tokens (default: the model's, capped at 4096).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
}

impl ModelOpts {
    /// Resolves the model path, picks the backend and sizes the thread pool.
    pub fn prepare(&self) -> Result<PathBuf> {
        match self.backend {
            BackendChoice::Cpu => {}
            BackendChoice::Cuda => {
                // Open the device first, so the message says what is missing (driver, GPU,
                // NVRTC) or what was found.
                let dev = ferrolm_cuda::CudaDevice::new(0).context("--backend cuda")?;
                bail!(
                    "--backend cuda: found {}, but the CUDA backend is not built yet \
                     (`ferrolm cuda-parity` checks its kernels); use --backend cpu",
                    dev.describe()
                )
            }
            BackendChoice::Auto => {}
        }
        if let Some(t) = self.threads {
            if t == 0 {
                bail!("-t/--threads must be at least 1");
            }
            // Fails only if a pool already exists, which cannot happen this early.
            let _ = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build_global();
        }
        super::pull::model_or_default(self.model.clone())
    }

    pub fn n_ctx(&self, model_ctx: usize) -> usize {
        self.ctx_size.unwrap_or(model_ctx.min(4096))
    }

    pub fn kv_type(&self) -> KvType {
        match self.cache_type {
            CacheType::F16 => KvType::F16,
            CacheType::F32 => KvType::F32,
        }
    }

    /// A session on `model` with the chosen context size and cache type.
    pub fn session<'m, 'a>(&self, model: &'m Model<'a>) -> Session<'m, 'a> {
        Session::with_kv_type(model, self.n_ctx(model.cfg.n_ctx), self.kv_type())
    }
}
