//! A model on the CPU ([`CpuModel`]): weights borrowed from the file's map (no second copy of
//! the file in RAM), caches, and forward passes run inside the model's own thread pool. The
//! same shape as the GPU's `CudaModel`, behind [`ModelRunner`].

use crate::backend::{CpuBackend, CpuCache, CpuWeight, Mat};
use crate::split::HostCollective;
use crate::{CpuPlan, KvType};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{Backend, PassInputs, SeqRows};
use ferrolm_model::dump::{dump_dir_from_env, Dump};
use ferrolm_model::forward::{embed, forward, layers};
use ferrolm_model::split::{ColumnCuts, Shard};
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::{Config, ModelError, ModelRunner, Result};
use std::convert::Infallible;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

pub struct CpuModel<'a> {
    pub cfg: Config,
    weights: ModelWeights<CpuWeight<'a>>,
    backend: CpuBackend<'a>,
    /// The forward pass runs inside this pool: every parallel op then starts from a worker
    /// thread instead of waking the pool from outside, which matters at one token per pass.
    pool: rayon::ThreadPool,
    /// `FERROLM_DUMP_DIR`, read at load: every pass then runs through [`Dump`].
    dump: Option<PathBuf>,
}

impl<'a> CpuModel<'a> {
    /// Binds every weight of `file` in place.
    pub fn load(file: &'a GgufFile) -> Result<Self> {
        let cfg = Config::from_gguf(file)?;
        let weights = ModelWeights::load(&cfg, file, CpuWeight::new)?;
        Self::with_weights(cfg, weights, rayon::current_num_threads())
    }

    /// Rank `shard` of a tensor split ([`crate::split`]): its shape, its parts of `file`'s
    /// tensors (`cfg` is the whole model's; `cuts` its column parts), and `coll` to sum its
    /// partial outputs with the other ranks'; its passes run on `threads` threads.
    pub fn load_rank(
        file: &'a GgufFile,
        cfg: &Config,
        shard: &Shard,
        cuts: &'a ColumnCuts,
        coll: Arc<HostCollective>,
        threads: usize,
    ) -> Result<Self> {
        let weights = shard.load_weights(cfg, file, cuts, CpuWeight::new)?;
        let mut m = Self::with_weights(shard.config(cfg), weights, threads)?;
        m.backend.join(coll, shard.rank);
        Ok(m)
    }

    fn with_weights(
        cfg: Config,
        weights: ModelWeights<CpuWeight<'a>>,
        threads: usize,
    ) -> Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| ModelError::Invalid(format!("thread pool: {e}")))?;
        let plan = CpuPlan::from_env().map_err(|e| ModelError::Invalid(e.to_string()))?;
        Ok(Self {
            cfg,
            weights,
            backend: CpuBackend::new(plan),
            pool,
            dump: dump_dir_from_env(),
        })
    }

    /// Batch-invariant mode (see `CpuPlan::set_batch_invariant`): results that do not depend
    /// on the batch's row count.
    pub fn set_batch_invariant(&mut self, on: bool) {
        self.backend.plan_mut().set_batch_invariant(on)
    }

    /// A cache for `n_ctx` positions of every block.
    pub fn new_cache(&self, n_ctx: usize, kv_type: KvType) -> CpuCache {
        CpuCache::new(&self.cfg, n_ctx, kv_type)
    }

    /// The embedding and blocks `blocks` (from the first), for `-ngl`: the residual stream
    /// after them as host floats, for the GPU to take over (`CudaModel::forward_from_host`).
    pub fn forward_to_host(
        &self,
        seqs: &mut [SeqRows<'_, CpuCache>],
        pass: &PassInputs<'_>,
        blocks: Range<usize>,
    ) -> Vec<f32> {
        let Ok(x) = self.pool.install(|| match &self.dump {
            Some(dir) => stream_on(&Dump::new(&self.backend, dir), self, seqs, pass, blocks),
            None => stream_on(&self.backend, self, seqs, pass, blocks),
        });
        x
    }
}

impl ModelRunner for CpuModel<'_> {
    type Cache = CpuCache;
    type Error = Infallible;
    type Logits = Vec<f32>;

    fn config(&self) -> &Config {
        &self.cfg
    }

    fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, CpuCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> std::result::Result<Vec<f32>, Infallible> {
        self.pool.install(|| match &self.dump {
            Some(dir) => logits_on(&Dump::new(&self.backend, dir), self, seqs, pass, logit_rows),
            None => logits_on(&self.backend, self, seqs, pass, logit_rows),
        })
    }
}

/// The CPU backend, or it wrapped in [`Dump`].
trait CpuOps<'a>:
    Backend<Weight = CpuWeight<'a>, Act = Mat, Cache = CpuCache, Error = Infallible>
{
}

impl<'a, B> CpuOps<'a> for B where
    B: Backend<Weight = CpuWeight<'a>, Act = Mat, Cache = CpuCache, Error = Infallible>
{
}

/// A whole pass on `b`: the logits of `logit_rows`.
fn logits_on<'a>(
    b: &impl CpuOps<'a>,
    m: &CpuModel<'a>,
    seqs: &mut [SeqRows<'_, CpuCache>],
    pass: &PassInputs<'_>,
    logit_rows: &[usize],
) -> std::result::Result<Vec<f32>, Infallible> {
    let inp = b.inputs(pass)?;
    let logits = forward(b, &m.cfg, &m.weights, seqs, &inp, logit_rows)?;
    b.to_host(&logits)
}

/// The embedding and `blocks` on `b`: the residual stream after them.
fn stream_on<'a>(
    b: &impl CpuOps<'a>,
    m: &CpuModel<'a>,
    seqs: &mut [SeqRows<'_, CpuCache>],
    pass: &PassInputs<'_>,
    blocks: Range<usize>,
) -> std::result::Result<Vec<f32>, Infallible> {
    let inp = b.inputs(pass)?;
    let mut x = embed(b, &m.cfg, &m.weights, &inp)?;
    layers(b, &m.cfg, &m.weights, seqs, &mut x, &inp, blocks)?;
    Ok(x.data)
}
