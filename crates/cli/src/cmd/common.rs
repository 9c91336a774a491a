//! Options shared by every subcommand that runs a model.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ferrolm_cuda::CudaDevice;
use ferrolm_engine::{Device, KvType, Model, Session};
use ferrolm_gguf::GgufFile;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// Resolves the model path and sizes the thread pool.
    pub fn prepare(&self) -> Result<PathBuf> {
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

    /// The device `--backend` and `-ngl` ask for. `auto` takes the GPU when one opens and says
    /// which it chose.
    pub fn device(&self) -> Result<Device> {
        if self.n_gpu_layers == 0 {
            return Ok(Device::Cpu);
        }
        let open = || CudaDevice::new(0).map(|d| Device::Cuda(Arc::new(d)));
        let device = match self.backend {
            BackendChoice::Cpu => Device::Cpu,
            // The error says what is missing (driver, GPU, NVRTC).
            BackendChoice::Cuda => open().context("--backend cuda")?,
            BackendChoice::Auto => open().unwrap_or(Device::Cpu),
        };
        if let Device::Cuda(d) = &device {
            eprintln!("ferrolm: using {}", d.describe());
        }
        Ok(device)
    }

    /// Loads `file` on the chosen device.
    pub fn load<'a>(&self, file: &'a GgufFile) -> Result<Model<'a>> {
        let device = self.device()?;
        if let Device::Cuda(_) = device {
            let n_layer = ferrolm_model::Config::from_gguf(file)?.n_layer as i32;
            if self.n_gpu_layers > 0 && self.n_gpu_layers < n_layer {
                bail!(
                    "-ngl {}: offloading part of the model ({} of {n_layer} layers) is not \
                     supported yet; use -ngl -1 (all) or 0 (CPU)",
                    self.n_gpu_layers,
                    self.n_gpu_layers
                );
            }
        }
        Ok(Model::load_on(file, &device)?)
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
