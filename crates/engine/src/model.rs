//! A model loaded onto a backend, ready to run forward passes.

use crate::sampler::greedy_pick;
use crate::session::EngineError;
use ferrolm_cpu::{CpuCache, CpuModel, KvElem, KvType};
use ferrolm_cuda::{
    CudaCache, CudaDevice, CudaModel, CudaSplit, CudaSplitModel, HostLogits, KvFormat,
    SplitCudaCache,
};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{PassInputs, SeqRows};
use ferrolm_model::split::on_threads;
use ferrolm_model::{Config, GreedyPick, ModelError, ModelRunner, Result};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;

/// Where a model runs.
#[derive(Clone)]
pub enum Device {
    Cpu,
    Cuda(Arc<CudaDevice>),
    /// A tensor split over these GPUs (`--split-mode row`): rank `r` on the `r`-th.
    CudaRanks(Vec<Arc<CudaDevice>>),
    /// A split by layer (`--split-mode layer`): runs of blocks in order, GPU `i` taking a
    /// share `shares[i]` of them ([`layer_runs`]).
    CudaLayers {
        devs: Vec<Arc<CudaDevice>>,
        shares: Vec<f32>,
    },
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
    /// `-ngl`: the first blocks on the CPU, the rest and the head on the GPU.
    Split {
        cpu: CpuModel<'a>,
        gpu: CudaModel,
    },
    /// `--split-mode row`: every block's heads, FFN width and experts shared out over GPUs.
    Ranks(CudaSplitModel),
    /// `--split-mode layer`: runs of blocks on GPUs in order, the head on the last.
    Layers(Vec<CudaModel>),
}

/// A pass's logits as the runner that made them returns them; derefs to `[rows][n_vocab]`.
pub(crate) enum PassLogits {
    Cpu(Vec<f32>),
    /// The GPU's host buffer (page-locked where the plan says so), which goes back to
    /// its runner through [`Model::recycle_logits`].
    Cuda(HostLogits),
}

impl Default for PassLogits {
    fn default() -> Self {
        Self::Cpu(Vec::new())
    }
}

impl std::ops::Deref for PassLogits {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            Self::Cpu(v) => v,
            Self::Cuda(h) => h,
        }
    }
}

/// The KV cache of one sequence, on the model's device.
pub enum Cache {
    Cpu(CpuCache),
    Cuda(Box<CudaCache>),
    /// The CPU's blocks' cache and the GPU's.
    Split(CpuCache, Box<CudaCache>),
    /// Each rank's cache, on its GPU.
    Ranks(Box<SplitCudaCache>),
    /// Each stage's cache (its blocks), on its GPU.
    Layers(Vec<CudaCache>),
}

impl Device {
    /// GPU `ordinal`, opened; the error says what is missing (driver, GPU, NVRTC).
    pub fn cuda(ordinal: usize) -> Result<Self, EngineError> {
        CudaDevice::new(ordinal)
            .map(|d| Device::Cuda(Arc::new(d)))
            .map_err(|e| EngineError::Backend(e.to_string()))
    }

    /// GPUs `0..n`, opened, for a tensor split over them.
    pub fn cuda_ranks(n: usize) -> Result<Self, EngineError> {
        Ok(Device::CudaRanks(open_gpus(n)?))
    }

    /// GPUs `0..shares.len()`, opened, for a split by layer in those shares.
    pub fn cuda_layers(shares: Vec<f32>) -> Result<Self, EngineError> {
        let devs = open_gpus(shares.len())?;
        Ok(Device::CudaLayers { devs, shares })
    }

    /// "cpu", or the GPU's description.
    pub fn describe(&self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Cuda(d) => d.describe(),
            Device::CudaRanks(ds) => split_over("a tensor split", ds.iter().map(|d| &**d)),
            Device::CudaLayers { devs, .. } => {
                split_over("a split by layer", devs.iter().map(|d| &**d))
            }
        }
    }
}

impl Cache {
    pub fn n_ctx(&self) -> usize {
        match self {
            Cache::Cpu(c) => c.n_ctx(),
            Cache::Cuda(c) | Cache::Split(_, c) => c.n_ctx(),
            Cache::Ranks(c) => c.n_ctx(),
            Cache::Layers(c) => c[0].n_ctx(),
        }
    }

    /// The GPU part's KV blocks held, and positions a block (`None` on the CPU, whose cache
    /// holds every position from the start).
    pub fn kv_blocks(&self) -> Option<(usize, usize)> {
        match self {
            Cache::Cpu(_) => None,
            Cache::Cuda(c) | Cache::Split(_, c) => Some(c.kv_blocks()),
            Cache::Ranks(c) => Some(c.kv_blocks()),
            Cache::Layers(c) => Some(c[0].kv_blocks()),
        }
    }

    /// Keeps positions `..n`: on a GPU, the blocks past them go back to the pool; the CPU's
    /// cache keeps its memory (positions past `n` are simply rewritten later).
    pub fn truncate(&mut self, n: usize) {
        match self {
            Cache::Cpu(_) => {}
            Cache::Cuda(c) | Cache::Split(_, c) => c.truncate(n),
            Cache::Ranks(c) => c.truncate(n),
            Cache::Layers(c) => c.iter_mut().for_each(|c| c.truncate(n)),
        }
    }
}

impl<'a> Model<'a> {
    /// Loads `file` for the CPU.
    pub fn load(file: &'a GgufFile) -> Result<Self> {
        Self::load_on(file, &Device::Cpu)
    }

    pub fn load_on(file: &'a GgufFile, device: &Device) -> Result<Self> {
        Self::load_split(file, device, 0)
    }

    /// Loads `file` with blocks `..first_gpu_layer` on the CPU and the rest, with the head, on
    /// `device` (all of it when `first_gpu_layer` is 0; everything on the CPU for `Device::Cpu`).
    pub fn load_split(file: &'a GgufFile, device: &Device, first_gpu_layer: usize) -> Result<Self> {
        let cfg = Config::from_gguf(file)?;
        cfg.check_blocks(file)?;
        let exec = match device {
            Device::Cpu => Exec::Cpu(CpuModel::load(file)?),
            Device::Cuda(dev) if first_gpu_layer == 0 => {
                Exec::Cuda(CudaModel::load(file, dev.clone())?)
            }
            Device::Cuda(dev) => Exec::Split {
                cpu: CpuModel::load(file)?,
                gpu: CudaModel::load_from_layer(file, dev.clone(), first_gpu_layer)?,
            },
            Device::CudaRanks(_) if first_gpu_layer > 0 => {
                return Err(ModelError::Invalid(
                    "a tensor split (--split-mode row) holds every block on the GPUs: \
                     -ngl cannot keep some on the CPU"
                        .into(),
                ))
            }
            Device::CudaRanks(devs) => {
                let parts = CudaSplit::prepare(file, devs.len())?;
                Exec::Ranks(CudaSplitModel::load(file, &parts, devs)?)
            }
            Device::CudaLayers { .. } if first_gpu_layer > 0 => {
                return Err(ModelError::Invalid(
                    "a split by layer (--split-mode layer) holds every block on the GPUs: \
                     -ngl cannot keep some on the CPU"
                        .into(),
                ))
            }
            Device::CudaLayers { devs, shares } => {
                let runs = layer_runs(cfg.n_layer, shares)?;
                // Each stage uploads from its own thread: the GPUs' copies overlap.
                let loaded = on_threads(runs, |(i, blocks)| {
                    CudaModel::load_blocks(file, devs[i].clone(), blocks)
                });
                let stages = (loaded.into_iter())
                    .map(|r| {
                        r.map_err(|_| ModelError::Invalid("a stage's upload panicked".into()))?
                    })
                    .collect::<Result<Vec<_>>>()?;
                Exec::Layers(stages)
            }
        };
        Ok(Self { cfg, file, exec })
    }

    /// Prompt tokens per forward pass unless told otherwise: llama.cpp's 512 on the CPU; 2048
    /// on a GPU, where the larger GEMMs fill the device better (OLMoE pp2048 on the H200: 27.4k
    /// t/s at 512, 37.9k at 2048).
    pub fn default_ubatch(&self) -> usize {
        match self.exec {
            Exec::Cpu(_) => 512,
            Exec::Cuda(_) | Exec::Split { .. } | Exec::Ranks(_) | Exec::Layers(_) => 2048,
        }
    }

    /// Batch-invariant mode, for a server batching sequences: every forward pass's results
    /// no longer depend on its batch's row count (the CPU matmul then uses one kernel at every
    /// size, see `CpuPlan::set_batch_invariant`), so a greedy answer is the same alone or under
    /// load; the cost is the mat-vec kernel's speed at one row. It applies to the blocks that
    /// run on the CPU.
    pub fn set_batch_invariant(&mut self, on: bool) {
        match &mut self.exec {
            Exec::Cpu(cpu) | Exec::Split { cpu, .. } => cpu.set_batch_invariant(on),
            Exec::Cuda(_) | Exec::Ranks(_) | Exec::Layers(_) => {}
        }
    }

    /// Every block runs on the CPU (no part on a GPU).
    pub fn is_cpu_only(&self) -> bool {
        matches!(self.exec, Exec::Cpu(_))
    }

    /// "cpu", or the GPU's description.
    pub fn device_name(&self) -> String {
        match &self.exec {
            Exec::Cpu(_) => "cpu".into(),
            Exec::Cuda(m) => m.device().describe(),
            Exec::Split { gpu, .. } => format!(
                "{} (blocks {}.. of {}; the first on the CPU)",
                gpu.device().describe(),
                gpu.first_layer(),
                self.cfg.n_layer
            ),
            Exec::Ranks(m) => split_over("a tensor split", m.ranks().iter().map(|r| r.device())),
            Exec::Layers(stages) => {
                let parts: Vec<String> = (stages.iter())
                    .map(|m| format!("blocks {:?} on {}", m.blocks(), m.device().describe()))
                    .collect();
                format!("a split by layer: {}", parts.join("; "))
            }
        }
    }

    /// Bytes one position of a [`Self::new_cache`] cache takes in RAM, and on the GPU (with
    /// the device) when part of it lives there: each as its cache type reckons it. An error
    /// when the device cannot keep a cache of `kv_type` (see [`Self::new_cache`]).
    pub(crate) fn kv_bytes_per_position(
        &self,
        kv_type: KvType,
    ) -> Result<KvBytes<'_>, EngineError> {
        let ram = || CpuCache::bytes_per_position(&self.cfg, kv_type);
        Ok(match &self.exec {
            Exec::Cpu(_) => (ram(), None),
            Exec::Cuda(m) => (
                0,
                Some((m.device(), m.kv_bytes_per_position(gpu_kv(kv_type)?))),
            ),
            // The CPU side's cache has every block (see `new_cache`).
            Exec::Split { gpu, .. } => (
                ram(),
                Some((gpu.device(), gpu.kv_bytes_per_position(gpu_kv(kv_type)?))),
            ),
            // Every rank's share is the same size: rank 0's device stands for each.
            Exec::Ranks(m) => {
                let r = &m.ranks()[0];
                (
                    0,
                    Some((r.device(), r.kv_bytes_per_position(gpu_kv(kv_type)?))),
                )
            }
            // The stage whose free memory holds the fewest positions stands for each.
            Exec::Layers(stages) => {
                let kv = gpu_kv(kv_type)?;
                let room = |m: &CudaModel| {
                    let free = m
                        .device()
                        .context()
                        .mem_get_info()
                        .map_or(0, |f| f.0 as u64);
                    free / m.kv_bytes_per_position(kv).max(1)
                };
                let tightest = stages.iter().min_by_key(|m| room(m));
                let m = tightest.expect("a split has stages");
                (0, Some((m.device(), m.kv_bytes_per_position(kv))))
            }
        })
    }

    /// Checks that this model can keep a cache of `kv_type` (quantized types need heads of
    /// whole 32-element blocks; the GPU keeps K and V in one type).
    pub fn check_kv_type(&self, kv_type: KvType) -> Result<(), EngineError> {
        kv_type
            .check(self.cfg.head_dim)
            .map_err(EngineError::Backend)?;
        if let Exec::Cuda(_) | Exec::Split { .. } | Exec::Ranks(_) | Exec::Layers(_) = self.exec {
            gpu_kv(kv_type)?;
        }
        Ok(())
    }

    /// Whether the model's KV caches are all paged on a GPU (not `-ngl` partial, not the
    /// CPU): then caches take memory as their sequences grow, from a pool
    /// ([`Self::reserve_kv`]) that need not hold every sequence's whole context.
    pub fn kv_is_paged(&self) -> bool {
        match &self.exec {
            Exec::Cuda(m) => m.shares_kv(),
            Exec::Ranks(m) => m.ranks()[0].shares_kv(),
            Exec::Layers(stages) => stages[0].shares_kv(),
            _ => false,
        }
    }

    /// Positions a block of the GPU's paged KV cache for sequences of up to `n_ctx` (`None`
    /// without a GPU).
    pub fn kv_block(&self, n_ctx: usize) -> Option<usize> {
        match &self.exec {
            Exec::Cpu(_) => None,
            Exec::Cuda(m) | Exec::Split { gpu: m, .. } => Some(m.kv_block(n_ctx)),
            Exec::Ranks(m) => Some(m.ranks()[0].kv_block(n_ctx)),
            Exec::Layers(stages) => Some(stages[0].kv_block(n_ctx)),
        }
    }

    /// Blocks for `n_seqs` whole contexts of `n_ctx` positions (`None` without a GPU).
    pub fn kv_blocks_for(&self, n_seqs: usize, n_ctx: usize) -> Option<usize> {
        self.kv_block(n_ctx).map(|b| n_seqs * n_ctx.div_ceil(b))
    }

    /// Makes the pool that GPU caches made after this share: `n_blocks` blocks of
    /// [`Self::kv_block`] positions in `kv_type`, for sequences of up to `n_ctx`, taken by
    /// each cache as its sequence grows. Nothing to do without a GPU (the CPU's caches are
    /// whole), or where the plan keeps a pool a cache (`FERROLM_KV_POOL=0`).
    pub fn reserve_kv(
        &self,
        n_blocks: usize,
        n_ctx: usize,
        kv_type: KvType,
    ) -> Result<(), EngineError> {
        self.check_kv_type(kv_type)?;
        let kv = gpu_kv(kv_type);
        match &self.exec {
            Exec::Cpu(_) => Ok(()),
            Exec::Cuda(m) | Exec::Split { gpu: m, .. } => m.reserve_kv(n_blocks, n_ctx, kv?),
            Exec::Ranks(m) => m.reserve_kv(n_blocks, n_ctx, kv?),
            Exec::Layers(stages) => {
                let kv = kv?;
                (stages.iter()).try_for_each(|m| m.reserve_kv(n_blocks, n_ctx, kv))
            }
        }
        .map_err(|e| EngineError::Backend(e.to_string()))
    }

    /// Blocks of `kv_type`, for sequences of up to `n_ctx`, that free GPU memory holds as a
    /// pool (`None` without a GPU).
    pub fn kv_blocks_that_fit(
        &self,
        kv_type: KvType,
        n_ctx: usize,
    ) -> Result<Option<usize>, EngineError> {
        self.check_kv_type(kv_type)?;
        let kv = gpu_kv(kv_type);
        match &self.exec {
            Exec::Cpu(_) => Ok(None),
            Exec::Cuda(m) | Exec::Split { gpu: m, .. } => {
                m.kv_blocks_that_fit(kv?, n_ctx).map(Some)
            }
            Exec::Ranks(m) => m.kv_blocks_that_fit(kv?, n_ctx).map(Some),
            Exec::Layers(stages) => {
                let kv = kv?;
                let fits = stages.iter().map(|m| m.kv_blocks_that_fit(kv, n_ctx));
                (fits.collect::<Result<Vec<_>, _>>()).map(|f| f.into_iter().min())
            }
        }
        .map_err(|e| EngineError::Backend(e.to_string()))
    }

    /// The shared pool's free blocks and positions a block (`None` without one).
    pub fn kv_free_blocks(&self) -> Option<(usize, usize)> {
        match &self.exec {
            Exec::Cpu(_) => None,
            Exec::Cuda(m) | Exec::Split { gpu: m, .. } => m.kv_free_blocks(),
            Exec::Ranks(m) => m.kv_free_blocks(),
            Exec::Layers(stages) => {
                let free = stages.iter().map(|m| m.kv_free_blocks());
                free.collect::<Option<Vec<_>>>()?.into_iter().min()
            }
        }
    }

    /// A KV cache for `n_ctx` positions in `kv_type`: f32, f16, q8_0 or q4_0 for K and V
    /// separately on the CPU; on the GPU f16, q8_0 or q4_0, the same for both.
    pub fn new_cache(&self, n_ctx: usize, kv_type: KvType) -> Result<Cache, EngineError> {
        self.check_kv_type(kv_type)?;
        let gpu_cache = |m: &CudaModel| {
            m.new_cache(n_ctx, gpu_kv(kv_type)?)
                .map(Box::new)
                .map_err(|e| EngineError::Backend(e.to_string()))
        };
        match &self.exec {
            Exec::Cpu(m) => Ok(Cache::Cpu(m.new_cache(n_ctx, kv_type))),
            Exec::Cuda(m) => gpu_cache(m).map(Cache::Cuda),
            Exec::Split { cpu, gpu } => {
                Ok(Cache::Split(cpu.new_cache(n_ctx, kv_type), gpu_cache(gpu)?))
            }
            Exec::Ranks(m) => m
                .new_cache(n_ctx, gpu_kv(kv_type)?)
                .map(|c| Cache::Ranks(Box::new(c)))
                .map_err(|e| EngineError::Backend(e.to_string())),
            Exec::Layers(stages) => {
                let kv = gpu_kv(kv_type)?;
                let caches = stages.iter().map(|m| m.new_cache(n_ctx, kv));
                caches
                    .collect::<Result<Vec<_>, _>>()
                    .map(Cache::Layers)
                    .map_err(|e| EngineError::Backend(e.to_string()))
            }
        }
    }

    /// Positions `0..n` of `src` copied into `dst`, two caches of this model made with the
    /// same size and type: a shared prompt prefilled once and given to other sequences.
    pub fn copy_cache_prefix(
        &self,
        src: &Cache,
        dst: &mut Cache,
        n: usize,
    ) -> Result<(), EngineError> {
        if n > src.n_ctx() || src.n_ctx() != dst.n_ctx() {
            return Err(EngineError::Backend(format!(
                "copying {n} positions between caches of {} and {} positions",
                src.n_ctx(),
                dst.n_ctx()
            )));
        }
        let gpu = |m: &CudaModel, s: &CudaCache, d: &mut CudaCache| {
            m.copy_cache_prefix(s, d, n)
                .map_err(|e| EngineError::Backend(e.to_string()))
        };
        match (&self.exec, src, dst) {
            (Exec::Cpu(_), Cache::Cpu(s), Cache::Cpu(d)) => d.copy_prefix_from(s, n),
            (Exec::Cuda(m), Cache::Cuda(s), Cache::Cuda(d)) => gpu(m, s, d)?,
            (Exec::Split { gpu: m, .. }, Cache::Split(cs, gs), Cache::Split(cd, gd)) => {
                cd.copy_prefix_from(cs, n);
                gpu(m, gs, gd)?;
            }
            (Exec::Ranks(m), Cache::Ranks(s), Cache::Ranks(d)) => m
                .copy_cache_prefix(s, d, n)
                .map_err(|e| EngineError::Backend(e.to_string()))?,
            (Exec::Layers(stages), Cache::Layers(s), Cache::Layers(d)) => {
                for ((m, s), d) in stages.iter().zip(s).zip(d.iter_mut()) {
                    gpu(m, s, d)?;
                }
            }
            _ => return Err(wrong_device()),
        }
        Ok(())
    }

    /// The logits `[logit_rows.len()][n_vocab]` of `tokens` placed at `pos0..`, in the
    /// runner's buffer (give it back with [`Self::recycle_logits`]).
    pub(crate) fn forward(
        &self,
        cache: &mut Cache,
        tokens: &[u32],
        pos0: usize,
        logit_rows: &[usize],
    ) -> Result<PassLogits, EngineError> {
        let positions: Vec<u32> = (pos0..pos0 + tokens.len()).map(|p| p as u32).collect();
        let rows = 0..tokens.len();
        self.forward_rows(
            &mut [SeqRows { cache, rows }],
            tokens,
            &positions,
            logit_rows,
        )
    }

    /// Gives logits back to the runner that made them, for its next pass to fill
    /// ([`ModelRunner::recycle_logits`]).
    pub(crate) fn recycle_logits(&self, logits: PassLogits) {
        match (&self.exec, logits) {
            (Exec::Cpu(m), PassLogits::Cpu(v)) => m.recycle_logits(v),
            (Exec::Cuda(m) | Exec::Split { gpu: m, .. }, PassLogits::Cuda(h)) => {
                m.recycle_logits(h)
            }
            (Exec::Ranks(m), PassLogits::Cuda(h)) => m.recycle_logits(h),
            (Exec::Layers(stages), PassLogits::Cuda(h)) => {
                stages.last().expect("a split has stages").recycle_logits(h)
            }
            // An empty pass's logits, made by no runner.
            _ => {}
        }
    }

    /// The one place a forward pass is started: on the CPU through [`CpuModel`] (inside its
    /// pool), on the GPU through [`CudaModel`] (which replays single-token steps of one
    /// sequence as a graph).
    pub(crate) fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, Cache>],
        tokens: &[u32],
        positions: &[u32],
        logit_rows: &[usize],
    ) -> Result<PassLogits, EngineError> {
        let pass = PassInputs { tokens, positions };
        match &self.exec {
            Exec::Cpu(m) => run(m, seqs, &pass, logit_rows, |c| match c {
                Cache::Cpu(c) => Some(c),
                _ => None,
            })
            .map(PassLogits::Cpu),
            Exec::Cuda(m) => run(m, seqs, &pass, logit_rows, |c| match c {
                Cache::Cuda(c) => Some(&mut **c),
                _ => None,
            })
            .map(PassLogits::Cuda),
            Exec::Ranks(m) => run(m, seqs, &pass, logit_rows, |c| match c {
                Cache::Ranks(c) => Some(&mut **c),
                _ => None,
            })
            .map(PassLogits::Cuda),
            Exec::Layers(stages) => self.forward_stages(stages, seqs, &pass, logit_rows),
            Exec::Split { cpu, gpu } => {
                let (mut on_cpu, mut on_gpu) = (Vec::new(), Vec::new());
                for s in seqs.iter_mut() {
                    let Cache::Split(c, g) = &mut *s.cache else {
                        return Err(wrong_device());
                    };
                    on_cpu.push(SeqRows {
                        cache: c,
                        rows: s.rows.clone(),
                    });
                    on_gpu.push(SeqRows {
                        cache: &mut **g,
                        rows: s.rows.clone(),
                    });
                }
                // The first blocks on the CPU; the residual stream crosses to the GPU once.
                let x = cpu.forward_to_host(&mut on_cpu, &pass, 0..gpu.first_layer());
                gpu.forward_from_host(&mut on_gpu, &x, &pass, logit_rows)
                    .map(PassLogits::Cuda)
                    .map_err(|e| EngineError::Backend(e.to_string()))
            }
        }
    }

    /// A pass of a split by layer: each stage's blocks on its GPU in turn, the residual
    /// stream crossing from GPU to GPU through the host, the head on the last.
    fn forward_stages(
        &self,
        stages: &[CudaModel],
        seqs: &mut [SeqRows<'_, Cache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> Result<PassLogits, EngineError> {
        let backend = |e: ferrolm_cuda::CudaError| EngineError::Backend(e.to_string());
        let mut x: Option<Vec<f32>> = None;
        let last = stages.len() - 1;
        for (i, m) in stages.iter().enumerate() {
            let mut own = narrow(seqs, |c| match c {
                Cache::Layers(c) => c.get_mut(i),
                _ => None,
            })?;
            if i < last {
                x = Some(
                    m.forward_stage(&mut own, x.as_deref(), pass)
                        .map_err(backend)?,
                );
                continue;
            }
            let x = x.as_deref().ok_or_else(wrong_device)?;
            let logits = m.forward_from_host(&mut own, x, pass, logit_rows);
            return logits.map(PassLogits::Cuda).map_err(backend);
        }
        Err(EngineError::Backend(
            "a split by layer without stages".into(),
        ))
    }

    /// [`Self::forward_rows`]'s pass, bringing back each logit row's greedy choices
    /// ([`GreedyPick`]) instead of its logits: picked on the GPU where its runner takes them
    /// there (the plan's `FERROLM_GREEDY_ON_DEVICE`), else from the logits on the host
    /// ([`greedy_pick`]); the same picks either way.
    pub(crate) fn forward_rows_greedy(
        &self,
        seqs: &mut [SeqRows<'_, Cache>],
        tokens: &[u32],
        positions: &[u32],
        logit_rows: &[usize],
        banned: &[u32],
    ) -> Result<Vec<GreedyPick>, EngineError> {
        if let Exec::Cuda(m) = &self.exec {
            let pass = PassInputs { tokens, positions };
            let mut own = narrow(seqs, |c| match c {
                Cache::Cuda(c) => Some(&mut **c),
                _ => None,
            })?;
            let picked = m
                .forward_rows_greedy(&mut own, &pass, logit_rows, banned)
                .map_err(|e| EngineError::Backend(e.to_string()))?;
            if let Some(picks) = picked {
                return Ok(picks);
            }
        }
        let logits = self.forward_rows(seqs, tokens, positions, logit_rows)?;
        let n_vocab = self.cfg.n_vocab;
        // On every core: 64 rows of a 152k vocabulary are about 2 ms on one.
        let picks = (logits[..].par_chunks(n_vocab))
            .map(|row| greedy_pick(row, banned))
            .collect();
        self.recycle_logits(logits);
        Ok(picks)
    }
}

/// Bytes per position in RAM, and on a GPU (with the device).
pub(crate) type KvBytes<'d> = (u64, Option<(&'d CudaDevice, u64)>);

/// The GPU's cache format for `kv`: K and V of one type, f16, f32 or a block format.
fn gpu_kv(kv: KvType) -> Result<KvFormat, EngineError> {
    match (kv.k, kv.v) {
        (KvElem::F16, KvElem::F16) => Ok(KvFormat::F16),
        (KvElem::F32, KvElem::F32) => Ok(KvFormat::F32),
        (KvElem::Q8_0, KvElem::Q8_0) => Ok(KvFormat::Q8_0),
        (KvElem::Q4_0, KvElem::Q4_0) => Ok(KvFormat::Q4_0),
        _ => Err(EngineError::Backend(format!(
            "the CUDA backend keeps K and V in one type, f16, f32, q8_0 or q4_0 (-ctk {} -ctv {} \
             asked); use --backend cpu for other caches",
            kv.k, kv.v
        ))),
    }
}

/// A pass on one runner, with the batch's caches narrowed to its own cache type.
fn run<'s, 'c, R: ModelRunner>(
    m: &R,
    seqs: &'s mut [SeqRows<'c, Cache>],
    pass: &PassInputs<'_>,
    logit_rows: &[usize],
    pick: impl Fn(&'s mut Cache) -> Option<&'s mut R::Cache>,
) -> Result<R::Logits, EngineError>
where
    R::Cache: 's,
{
    let mut own = narrow(seqs, pick)?;
    m.forward_rows(&mut own, pass, logit_rows)
        .map_err(|e| EngineError::Backend(e.to_string()))
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
                .ok_or_else(wrong_device)
        })
        .collect()
}

/// "`kind` over" the GPUs' descriptions.
fn split_over<'d>(kind: &str, devs: impl Iterator<Item = &'d CudaDevice>) -> String {
    let names: Vec<String> = devs.map(CudaDevice::describe).collect();
    format!("{kind} over {}", names.join(", "))
}

/// GPUs `0..n`, opened.
fn open_gpus(n: usize) -> Result<Vec<Arc<CudaDevice>>, EngineError> {
    (0..n)
        .map(|i| match Device::cuda(i)? {
            Device::Cuda(d) => Ok(d),
            _ => unreachable!("Device::cuda opens one GPU"),
        })
        .collect()
}

/// The runs of blocks a split by layer gives each GPU: `(gpu, blocks)` in block order, GPU
/// `i` taking about `shares[i]` of the whole (llama.cpp's `-ts`: each boundary the share so
/// far, rounded), GPUs whose run is empty left out; at least two stages.
pub fn layer_runs(n_layer: usize, shares: &[f32]) -> Result<Vec<(usize, Range<usize>)>> {
    let total: f32 = shares.iter().sum();
    if shares.iter().any(|s| !s.is_finite() || *s < 0.0) || total <= 0.0 {
        return Err(ModelError::Invalid(format!(
            "--tensor-split {shares:?}: shares must be numbers 0 or more, not all 0"
        )));
    }
    let (mut runs, mut so_far, mut start) = (Vec::new(), 0.0f32, 0usize);
    for (i, s) in shares.iter().enumerate() {
        so_far += s;
        let end = if i + 1 == shares.len() {
            n_layer
        } else {
            ((so_far / total * n_layer as f32).round() as usize).clamp(start, n_layer)
        };
        if end > start {
            runs.push((i, start..end));
        }
        start = end;
    }
    if runs.len() < 2 {
        return Err(ModelError::Invalid(format!(
            "--tensor-split {shares:?} puts all {n_layer} blocks on one GPU: a split by layer \
             needs two; use --split-mode none --main-gpu N for one"
        )));
    }
    Ok(runs)
}

fn wrong_device() -> EngineError {
    EngineError::Backend("a KV cache used with a model on another device".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU takes K and V of one type, f32 included (the F32 goldens' cache); a mixed pair
    /// is an error naming both flags' values.
    #[test]
    fn gpu_cache_formats() {
        let one = |e| gpu_kv(KvType::new(e, e)).unwrap();
        assert_eq!(one(KvElem::F16), KvFormat::F16);
        assert_eq!(one(KvElem::F32), KvFormat::F32);
        assert_eq!(one(KvElem::Q8_0), KvFormat::Q8_0);
        assert_eq!(one(KvElem::Q4_0), KvFormat::Q4_0);
        let err = gpu_kv(KvType::new(KvElem::F32, KvElem::F16))
            .unwrap_err()
            .to_string();
        assert!(err.contains("-ctk f32 -ctv f16"), "{err}");
    }

    #[test]
    fn layer_runs_follow_the_shares_in_order() {
        let runs = |n, s: &[f32]| layer_runs(n, s).unwrap();
        assert_eq!(runs(48, &[1.0, 1.0]), vec![(0, 0..24), (1, 24..48)]);
        let four = vec![(0, 0..24), (1, 24..47), (2, 47..71), (3, 71..94)];
        assert_eq!(runs(94, &[1.0, 1.0, 1.0, 1.0]), four);
        assert_eq!(runs(10, &[3.0, 1.0]), vec![(0, 0..8), (1, 8..10)]);
        // A GPU with no share is left out.
        assert_eq!(runs(10, &[1.0, 0.0, 1.0]), vec![(0, 0..5), (2, 5..10)]);
        for bad in [&[1.0, -1.0][..], &[0.0, 0.0], &[f32::NAN, 1.0]] {
            assert!(layer_runs(10, bad).is_err(), "{bad:?}");
        }
        let e = layer_runs(10, &[1.0, 0.0]).unwrap_err().to_string();
        assert!(e.contains("needs two"), "{e}");
    }
}
