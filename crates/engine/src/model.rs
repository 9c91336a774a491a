//! A model loaded onto a backend, ready to run forward passes.

use crate::session::EngineError;
use ferrolm_cpu::{CpuBackend, CpuCache, CpuWeight, KvType};
use ferrolm_cuda::{CudaCache, CudaDevice, CudaModel};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{Backend, SeqRows};
use ferrolm_model::forward::forward;
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::{Config, Result};
use std::sync::Arc;

/// Where a model runs.
#[derive(Clone)]
pub enum Device {
    Cpu,
    Cuda(Arc<CudaDevice>),
}

/// A model on the CPU or a GPU. On the CPU, weights borrow the file's map: no second copy of
/// the file in RAM.
pub struct Model<'a> {
    pub cfg: Config,
    pub file: &'a GgufFile,
    exec: Exec<'a>,
}

// One model per process: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
enum Exec<'a> {
    Cpu(CpuModel<'a>),
    Cuda(CudaModel),
}

struct CpuModel<'a> {
    weights: ModelWeights<CpuWeight<'a>>,
    backend: CpuBackend<'a>,
    /// The forward pass runs inside this pool: every parallel op then starts from a worker
    /// thread instead of waking the pool from outside, which matters at one token per pass.
    pool: rayon::ThreadPool,
}

/// The KV cache of one sequence, on the model's device.
pub enum Cache {
    Cpu(CpuCache),
    Cuda(Box<CudaCache>),
}

impl Device {
    /// GPU `ordinal`, opened; the error says what is missing (driver, GPU, NVRTC).
    pub fn cuda(ordinal: usize) -> Result<Self, EngineError> {
        CudaDevice::new(ordinal)
            .map(|d| Device::Cuda(Arc::new(d)))
            .map_err(|e| EngineError::Backend(e.to_string()))
    }
}

impl Cache {
    pub fn n_ctx(&self) -> usize {
        match self {
            Cache::Cpu(c) => c.n_ctx(),
            Cache::Cuda(c) => c.n_ctx(),
        }
    }
}

impl<'a> Model<'a> {
    /// Loads `file` for the CPU.
    pub fn load(file: &'a GgufFile) -> Result<Self> {
        Self::load_on(file, &Device::Cpu)
    }

    pub fn load_on(file: &'a GgufFile, device: &Device) -> Result<Self> {
        let cfg = Config::from_gguf(file)?;
        let exec = match device {
            Device::Cpu => {
                let weights = ModelWeights::load(&cfg, file, |name, ty, dims, data| {
                    CpuWeight::new(name, ty, dims, data)
                })?;
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(rayon::current_num_threads())
                    .build()
                    .map_err(|e| ferrolm_model::ModelError::Invalid(format!("thread pool: {e}")))?;
                Exec::Cpu(CpuModel {
                    weights,
                    backend: CpuBackend::default(),
                    pool,
                })
            }
            Device::Cuda(dev) => Exec::Cuda(CudaModel::load(file, dev.clone())?),
        };
        Ok(Self { cfg, file, exec })
    }

    /// Prompt tokens per forward pass unless told otherwise: llama.cpp's 512 on the CPU; 2048
    /// on a GPU, where the larger GEMMs fill the device better (OLMoE pp2048 on the H200: 27.4k
    /// t/s at 512, 37.9k at 2048).
    pub fn default_ubatch(&self) -> usize {
        match self.exec {
            Exec::Cpu(_) => 512,
            Exec::Cuda(_) => 2048,
        }
    }

    /// "cpu", or the GPU's description.
    pub fn device_name(&self) -> String {
        match &self.exec {
            Exec::Cpu(_) => "cpu".into(),
            Exec::Cuda(m) => m.device().describe(),
        }
    }

    /// A KV cache for `n_ctx` positions. The GPU keeps its cache in f16 only.
    pub fn new_cache(&self, n_ctx: usize, kv_type: KvType) -> Result<Cache, EngineError> {
        match &self.exec {
            Exec::Cpu(_) => Ok(Cache::Cpu(CpuCache::new(&self.cfg, n_ctx, kv_type))),
            Exec::Cuda(m) => {
                if kv_type != KvType::F16 {
                    return Err(EngineError::Backend(
                        "the CUDA backend keeps its KV cache in f16 only".into(),
                    ));
                }
                m.new_cache(n_ctx)
                    .map(|c| Cache::Cuda(Box::new(c)))
                    .map_err(|e| EngineError::Backend(e.to_string()))
            }
        }
    }

    /// Logits `[logit_rows.len()][n_vocab]` for `tokens` placed at `pos0..`.
    pub(crate) fn forward(
        &self,
        cache: &mut Cache,
        tokens: &[u32],
        pos0: usize,
        logit_rows: &[usize],
    ) -> Result<Vec<f32>, EngineError> {
        let positions: Vec<u32> = (pos0..pos0 + tokens.len()).map(|p| p as u32).collect();
        let rows = 0..tokens.len();
        self.forward_rows(
            &mut [SeqRows { cache, rows }],
            tokens,
            &positions,
            logit_rows,
        )
    }

    /// The one place a forward pass is started: on the CPU inside the model's pool, on the GPU
    /// through [`CudaModel`] (which replays single-token steps of one sequence as a graph).
    pub(crate) fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, Cache>],
        tokens: &[u32],
        positions: &[u32],
        logit_rows: &[usize],
    ) -> Result<Vec<f32>, EngineError> {
        match &self.exec {
            Exec::Cpu(m) => {
                let mut cpu = narrow(seqs, |c| match c {
                    Cache::Cpu(c) => Some(c),
                    Cache::Cuda(_) => None,
                })?;
                Ok(m.pool.install(|| {
                    let logits = forward(
                        &m.backend, &self.cfg, &m.weights, &mut cpu, tokens, positions, logit_rows,
                    );
                    m.backend.to_host(&logits)
                }))
            }
            Exec::Cuda(m) => {
                let mut gpu = narrow(seqs, |c| match c {
                    Cache::Cuda(c) => Some(&mut **c),
                    Cache::Cpu(_) => None,
                })?;
                m.forward_rows(&mut gpu, tokens, positions, logit_rows)
                    .map_err(|e| EngineError::Backend(e.to_string()))
            }
        }
    }
}

/// The batch's caches as the device's own cache type; an error when one lives elsewhere.
fn narrow<'s, 'c, C>(
    seqs: &'s mut [SeqRows<'c, Cache>],
    pick: impl Fn(&'s mut Cache) -> Option<&'s mut C>,
) -> Result<Vec<SeqRows<'s, C>>, EngineError> {
    seqs.iter_mut()
        .map(|s| {
            let rows = s.rows.clone();
            pick(&mut *s.cache)
                .map(|cache| SeqRows { cache, rows })
                .ok_or_else(|| {
                    EngineError::Backend("a KV cache used with a model on another device".into())
                })
        })
        .collect()
}
