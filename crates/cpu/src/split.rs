//! A tensor split ([`ferrolm_model::split`]) on the CPU: each rank a [`CpuModel`] of its own
//! shape over its slices of the file, all ranks running every pass at once on their own
//! threads and summing their partial outputs through host memory ([`HostCollective`]). It is
//! the reference a GPU split is held to: the same parts, the same two sums a block, in rank
//! order.

use crate::backend::CpuCache;
use crate::runner::CpuModel;
use crate::KvType;
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{PassInputs, SeqRows};
use ferrolm_model::split::{by_rank, on_threads, shards, ColumnCuts, Shard};
use ferrolm_model::{Config, ModelError, ModelRunner, Result};
use std::sync::{Arc, Condvar, Mutex};

/// The ranks' meeting point for [`Self::all_reduce`].
pub struct HostCollective {
    ranks: usize,
    state: Mutex<Meeting>,
    met: Condvar,
}

/// The parts of the sum under way, and a barrier that a rank's panic breaks (so the other
/// ranks stop instead of waiting for it forever).
struct Meeting {
    parts: Vec<Vec<f32>>,
    arrived: usize,
    generation: u64,
    broken: bool,
}

impl HostCollective {
    pub fn new(ranks: usize) -> Arc<Self> {
        Arc::new(Self {
            ranks,
            state: Mutex::new(Meeting {
                parts: vec![Vec::new(); ranks],
                arrived: 0,
                generation: 0,
                broken: false,
            }),
            met: Condvar::new(),
        })
    }

    /// Every rank's `x` summed in rank order, written to every rank's `x`: the same bits on
    /// each. Every rank must call it, with the same length, for the others to go on.
    pub fn all_reduce(&self, rank: usize, x: &mut [f32]) {
        if self.ranks == 1 {
            return;
        }
        self.lock().parts[rank] = x.to_vec();
        self.wait();
        {
            let m = self.lock();
            x.copy_from_slice(&m.parts[0]);
            for p in &m.parts[1..] {
                crate::norm::add_assign(x, p);
            }
        }
        // No rank writes its next part before every rank has read this one.
        self.wait();
    }

    /// Ends every wait, now and later: a rank has stopped and will not arrive.
    pub fn break_up(&self) {
        self.lock().broken = true;
        self.met.notify_all();
    }

    /// Returns when every rank has arrived; panics if the meeting was broken up.
    fn wait(&self) {
        let mut m = self.lock();
        let generation = m.generation;
        m.arrived += 1;
        if m.arrived == self.ranks {
            m.arrived = 0;
            m.generation += 1;
            self.met.notify_all();
        }
        while m.generation == generation && !m.broken {
            m = self.met.wait(m).unwrap_or_else(|e| e.into_inner());
        }
        assert!(!m.broken, "another rank of the split stopped");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Meeting> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a split's ranks read besides the file: each rank's column parts, copied out once.
pub struct CpuSplit {
    /// The whole model's shape.
    cfg: Config,
    shards: Vec<Shard>,
    cuts: Vec<ColumnCuts>,
}

impl CpuSplit {
    /// The parts of `file`'s model over `ranks` ranks; the error names what does not split.
    pub fn prepare(file: &GgufFile, ranks: usize) -> Result<Self> {
        let cfg = Config::from_gguf(file)?;
        let shards = shards(&cfg, ranks)?;
        let cuts = shards
            .iter()
            .map(|s| ColumnCuts::cut(&cfg, file, s))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { cfg, shards, cuts })
    }
}

/// A model split over ranks on the CPU; runs like the whole model, through [`ModelRunner`].
pub struct CpuSplitModel<'a> {
    /// The whole model's shape (a rank's own is narrower).
    cfg: Config,
    ranks: Vec<CpuModel<'a>>,
    coll: Arc<HostCollective>,
}

/// One sequence's KV cache: each rank's, for its own KV heads.
pub struct SplitCache {
    ranks: Vec<CpuCache>,
}

impl<'a> CpuSplitModel<'a> {
    /// Binds every rank's part of `file` (made by [`CpuSplit::prepare`] from the same file);
    /// the ranks share this process's threads.
    pub fn load(file: &'a GgufFile, split: &'a CpuSplit) -> Result<Self> {
        let cfg = split.cfg.clone();
        let n = split.shards.len();
        let threads = (rayon::current_num_threads() / n).max(1);
        let coll = HostCollective::new(n);
        let ranks = (split.shards.iter().zip(&split.cuts))
            .map(|(s, cuts)| CpuModel::load_rank(file, &cfg, s, cuts, coll.clone(), threads))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { cfg, ranks, coll })
    }

    /// A cache for `n_ctx` positions of every block, on every rank.
    pub fn new_cache(&self, n_ctx: usize, kv_type: KvType) -> SplitCache {
        let ranks = self.ranks.iter().map(|m| m.new_cache(n_ctx, kv_type));
        SplitCache {
            ranks: ranks.collect(),
        }
    }
}

impl ModelRunner for CpuSplitModel<'_> {
    type Cache = SplitCache;
    type Error = ModelError;
    type Logits = Vec<f32>;

    fn config(&self) -> &Config {
        &self.cfg
    }

    /// Every rank runs the pass on its own thread; after the last all-reduce every rank holds
    /// the same residual stream and so the same logits: rank 0's are returned.
    fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, SplitCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> Result<Vec<f32>> {
        let Some(mut per_rank) = by_rank(seqs, self.ranks.len(), |c| &mut c.ranks[..]) else {
            return Err(ModelError::Invalid(
                "a cache made for another split was passed to this model".into(),
            ));
        };
        let coll = &self.coll;
        let logits = on_threads(self.ranks.iter().zip(&mut per_rank), |(m, seqs)| {
            let pass = std::panic::AssertUnwindSafe(|| {
                let Ok(l) = m.forward_rows(seqs, pass, logit_rows);
                l
            });
            // A rank that stops lets the others stop too.
            std::panic::catch_unwind(pass).inspect_err(|_| coll.break_up())
        });
        if logits.iter().any(|l| !matches!(l, Ok(Ok(_)))) {
            return Err(ModelError::Invalid("a rank's forward pass panicked".into()));
        }
        match logits.into_iter().next() {
            Some(Ok(Ok(l))) => Ok(l),
            _ => Err(ModelError::Invalid("a split without ranks".into())),
        }
    }
}
