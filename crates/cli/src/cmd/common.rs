//! Options shared by every subcommand that runs a model.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ferrolm_engine::{Device, KvElem, KvType, Model, Session};
use ferrolm_gguf::GgufFile;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    Cpu,
    Cuda,
    /// CUDA when a device is present, else the CPU.
    Auto,
}

/// How a model spreads over several GPUs, by llama.cpp's `-sm` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SplitMode {
    /// One GPU (`--main-gpu`).
    None,
    /// Runs of blocks by GPU, in order, the residual stream passed on through the host.
    Layer,
    /// Every block's heads, FFN width and experts shared out over the GPUs, their partial
    /// outputs summed through NCCL twice a block.
    Row,
}

/// A KV cache element type, by llama.cpp's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CacheType {
    F16,
    F32,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
}

impl From<CacheType> for KvElem {
    fn from(c: CacheType) -> Self {
        match c {
            CacheType::F16 => KvElem::F16,
            CacheType::F32 => KvElem::F32,
            CacheType::Q8_0 => KvElem::Q8_0,
            CacheType::Q4_0 => KvElem::Q4_0,
        }
    }
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
    /// How the model spreads over several GPUs (llama.cpp's -sm): none, layer or row, over
    /// the GPUs --tensor-split counts, else all of them.
    #[arg(long = "split-mode", visible_alias = "sm", value_enum, default_value_t = SplitMode::None)]
    pub split_mode: SplitMode,
    /// The model's share on each GPU, from GPU 0 (llama.cpp's -ts, e.g. 3,1): how many GPUs a
    /// split takes and, by layer, how many blocks each gets; a row split's must be equal.
    #[arg(
        long = "tensor-split",
        visible_alias = "ts",
        value_delimiter = ',',
        value_name = "SHARES"
    )]
    pub tensor_split: Option<Vec<f32>>,
    /// The GPU a model on one GPU runs on (llama.cpp's -mg).
    #[arg(long = "main-gpu", visible_alias = "mg", default_value_t = 0)]
    pub main_gpu: usize,
    /// CPU threads (default: all cores).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    pub threads: Option<usize>,
    /// KV cache element type of K and V both (default f16, llama.cpp's; f32 is exact); -ctk
    /// and -ctv set each.
    #[arg(long = "cache-type", value_enum, value_name = "TYPE")]
    pub cache_type: Option<CacheType>,
    /// K cache type (llama.cpp's -ctk): f16, f32, q8_0 or q4_0.
    #[arg(
        long = "cache-type-k",
        visible_alias = "ctk",
        value_enum,
        value_name = "TYPE"
    )]
    pub cache_type_k: Option<CacheType>,
    /// V cache type (llama.cpp's -ctv): f16, f32, q8_0 or q4_0. Attention over a quantized V
    /// is always flash attention in ferrolm (llama.cpp requires -fa for it).
    #[arg(
        long = "cache-type-v",
        visible_alias = "ctv",
        value_enum,
        value_name = "TYPE"
    )]
    pub cache_type_v: Option<CacheType>,
    /// Context size in tokens (default: the model's, capped at 4096).
    #[arg(short = 'c', long = "ctx-size", allow_negative_numbers = true)]
    pub ctx_size: Option<usize>,
}

impl ModelOpts {
    /// Resolves the model path and sizes the thread pool.
    pub fn prepare(&self) -> Result<PathBuf> {
        if let Some(t) = self.threads {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if t == 0 || t > 4 * cores {
                bail!(
                    "-t/--threads is {t}; it must be between 1 and {} (this machine has {cores} cores)",
                    4 * cores
                );
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
        if let Some(shares) = self.split_shares()? {
            if self.backend == BackendChoice::Cpu || self.n_gpu_layers == 0 {
                bail!("--split-mode runs on GPUs: it takes neither --backend cpu nor -ngl 0");
            }
            let device = match self.split_mode {
                SplitMode::Row => Device::cuda_ranks(shares.len()).context("--split-mode row"),
                _ => Device::cuda_layers(shares).context("--split-mode layer"),
            }?;
            eprintln!("ferrolm: using {}", device.describe());
            return Ok(device);
        }
        if self.n_gpu_layers == 0 {
            return Ok(Device::Cpu);
        }
        let open = || Device::cuda(self.main_gpu);
        let device = match self.backend {
            BackendChoice::Cpu => Device::Cpu,
            // The error says what is missing (driver, GPU, NVRTC).
            BackendChoice::Cuda => open().context("--backend cuda")?,
            BackendChoice::Auto => open().unwrap_or(Device::Cpu),
        };
        if let Device::Cuda(_) = &device {
            eprintln!("ferrolm: using {}", device.describe());
        }
        Ok(device)
    }

    /// Each GPU's share of a split (`None` for one device): `--tensor-split`'s, else equal
    /// shares of every GPU; an error for shares a split cannot take.
    fn split_shares(&self) -> Result<Option<Vec<f32>>> {
        if self.split_mode == SplitMode::None {
            if self.tensor_split.is_some() {
                bail!(
                    "--tensor-split shares a split: give --split-mode layer or row with it \
                     (without one, ferrolm runs on one GPU, --main-gpu)"
                );
            }
            return Ok(None);
        }
        let shares = match self.tensor_split.clone() {
            Some(s) => s,
            None => vec![1.0; ferrolm_cuda::CudaDevice::count()],
        };
        if let Some(s) = shares.iter().find(|s| !s.is_finite() || **s < 0.0) {
            bail!("--tensor-split: {s} is not a share (a number 0 or more)");
        }
        if shares.is_empty() {
            bail!("--split-mode: no GPU found");
        }
        let row = self.split_mode == SplitMode::Row;
        if row && shares.iter().any(|&s| s != shares[0] || s == 0.0) {
            bail!(
                "--split-mode row takes equal shares above 0 (--tensor-split {}): unequal ones \
                 are not built; --split-mode layer takes any",
                vec!["1"; shares.len()].join(",")
            );
        }
        Ok(Some(shares))
    }

    /// Loads `file` on the chosen device, split as `-ngl` says (llama.cpp's count: the last N
    /// of the blocks plus the output; -1 or more than the blocks: everything).
    pub fn load<'a>(&self, file: &'a GgufFile) -> Result<Model<'a>> {
        let device = self.device()?;
        let n_layer = ferrolm_model::Config::from_gguf(file)?.n_layer;
        let first_gpu = first_gpu_layer(self.n_gpu_layers, n_layer);
        if first_gpu > 0 {
            if let Device::Cuda(_) = device {
                eprintln!(
                    "ferrolm: blocks 0..{first_gpu} of {n_layer} on the CPU, the rest on the GPU"
                );
            }
        }
        Ok(Model::load_split(file, &device, first_gpu)?)
    }

    pub fn n_ctx(&self, model_ctx: usize) -> usize {
        self.ctx_size.unwrap_or(model_ctx.min(4096))
    }

    /// The cache types `-ctk`, `-ctv` and `--cache-type` ask for (each of K and V: its own
    /// flag, else `--cache-type`, else f16).
    pub fn kv_type(&self) -> KvType {
        let pick = |own: Option<CacheType>| own.or(self.cache_type).unwrap_or(CacheType::F16);
        KvType::new(
            pick(self.cache_type_k).into(),
            pick(self.cache_type_v).into(),
        )
    }

    /// Checks that `n_seqs` KV caches of `n_ctx` positions fit in memory (RAM, GPU memory),
    /// before any is allocated; the error says what would fit.
    pub fn check_fits(&self, model: &Model, n_ctx: usize, n_seqs: usize) -> Result<()> {
        Ok(model.check_kv_fits(n_ctx, self.kv_type(), n_seqs)?)
    }

    /// A session on `model` with the chosen context size and cache type, checked to fit.
    pub fn session<'m, 'a>(&self, model: &'m Model<'a>) -> Result<Session<'m, 'a>> {
        let n_ctx = self.n_ctx(model.cfg.n_ctx);
        self.check_fits(model, n_ctx, 1)?;
        Ok(Session::with_kv_type(model, n_ctx, self.kv_type()))
    }
}

/// The first block on the GPU for `-ngl N` with `n_layer` blocks: llama.cpp counts the output
/// as one more layer and offloads the last N, so N = n_layer + 1 (or -1, or more) is all of it
/// and N = 1 the output alone. (0 never reaches here: it picks the CPU device.)
fn first_gpu_layer(ngl: i32, n_layer: usize) -> usize {
    if ngl < 0 {
        return 0;
    }
    (n_layer + 1).saturating_sub(ngl as usize).min(n_layer)
}

#[cfg(test)]
mod tests {
    use super::first_gpu_layer;

    #[test]
    fn ngl_counts_like_llama_cpp() {
        assert_eq!(first_gpu_layer(-1, 30), 0);
        assert_eq!(first_gpu_layer(99, 30), 0);
        assert_eq!(first_gpu_layer(31, 30), 0);
        assert_eq!(first_gpu_layer(30, 30), 1);
        assert_eq!(first_gpu_layer(10, 30), 21);
        assert_eq!(first_gpu_layer(1, 30), 30);
    }
}
