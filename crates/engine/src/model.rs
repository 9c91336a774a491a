//! A model loaded onto a backend, ready to run forward passes.

use ferrolm_cpu::{CpuBackend, CpuCache, CpuWeight, KvType};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::SeqRows;
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::{Config, Result};

/// A model on the CPU. Weights borrow the file's map: no second copy of the file in RAM.
pub struct Model<'a> {
    pub cfg: Config,
    pub file: &'a GgufFile,
    pub(crate) weights: ModelWeights<CpuWeight<'a>>,
    pub(crate) backend: CpuBackend<'a>,
    /// The forward pass runs inside this pool: every parallel op then starts from a worker
    /// thread instead of waking the pool from outside, which matters at one token per pass.
    pub(crate) pool: rayon::ThreadPool,
}

impl<'a> Model<'a> {
    pub fn load(file: &'a GgufFile) -> Result<Self> {
        let cfg = Config::from_gguf(file)?;
        let weights = ModelWeights::load(&cfg, file, |name, ty, dims, data| {
            CpuWeight::new(name, ty, dims, data)
        })?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .build()
            .map_err(|e| ferrolm_model::ModelError::Invalid(format!("thread pool: {e}")))?;
        Ok(Self {
            cfg,
            file,
            weights,
            backend: CpuBackend::default(),
            pool,
        })
    }

    pub fn new_cache(&self, n_ctx: usize, kv_type: KvType) -> CpuCache {
        CpuCache::new(&self.cfg, n_ctx, kv_type)
    }

    /// Logits `[logit_rows.len()][n_vocab]` for `tokens` placed at `pos0..`.
    pub(crate) fn forward(
        &self,
        cache: &mut CpuCache,
        tokens: &[u32],
        pos0: usize,
        logit_rows: &[usize],
    ) -> Vec<f32> {
        let positions: Vec<u32> = (pos0..pos0 + tokens.len()).map(|p| p as u32).collect();
        let rows = 0..tokens.len();
        self.forward_rows(
            &mut [SeqRows { cache, rows }],
            tokens,
            &positions,
            logit_rows,
        )
    }
}
