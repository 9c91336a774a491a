//! A tensor split ([`ferrolm_model::split`]) over several GPUs: rank `r` a [`CudaModel`] of its
//! own shape on GPU `r`, its partial outputs summed by NCCL (through cudarc) on its stream.
//!
//! One process drives every GPU, a thread per rank for each pass: the engine, its scheduler and
//! the server stay one process as on one GPU, each rank's decode steps are captured as graphs
//! as before (NCCL's collectives are capturable), and no launcher or rendezvous is needed. The
//! communicators come from one `ncclCommInitAll` ([`Comm::from_devices`]).
//!
//! Contract: the same parts and the same two sums a block as the CPU's split
//! (`ferrolm_cpu::CpuSplitModel`), whose logits equal the whole model's up to f32 summation
//! order; NCCL sums in its own order, the same bits on every rank.
//!
//! Experts: each rank routes every token over all experts (the router is whole), then
//! `moe_localize` turns the choices into indices among its own experts, -1 for the others',
//! which every expert kernel skips: a rank reads only its experts' weights.
//!
//! A rank whose pass fails or panics leaves the others a few seconds to stop by themselves
//! (an error every rank meets before any collective, which the split survives); after that
//! every communicator is aborted, which ends the collectives they wait in, and the split
//! refuses further passes (load it again). NCCL connects peers on a protocol's first use, a
//! host call that waits for every rank: done at load (`warm_up`), so a pass only queues.

use super::runner::{prepare_writes, CudaCache, CudaModel};
use crate::device::CudaDevice;
use crate::error::{CudaError, Result};
use crate::host_logits::HostLogits;
use crate::ops::KvFormat;
use cudarc::driver::CudaSlice;
use cudarc::nccl::{Comm, ReduceOp};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{PassInputs, SeqRows};
use ferrolm_model::split::{by_rank, on_threads, shards, ColumnCuts, Shard};
use ferrolm_model::{Config, ModelError, ModelRunner};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One rank's NCCL communicator; `None` once aborted ([`Self::abort`]).
pub(super) struct RankComm(Mutex<Option<Comm>>);

// SAFETY: NCCL allows a communicator to be used from any thread, one call at a time; the
// mutex serializes the calls.
unsafe impl Send for RankComm {}
unsafe impl Sync for RankComm {}

impl RankComm {
    /// The first `len` floats of `x` summed over the ranks in place (every rank's `len` is
    /// the same: the pass's rows times the model's width).
    pub(super) fn sum_in_place(&self, x: &mut CudaSlice<f32>, len: usize) -> Result<()> {
        let comm = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(comm) = comm.as_ref() else {
            return Err(CudaError::Invalid(
                "a rank of this split failed and the split was stopped: load the model again"
                    .into(),
            ));
        };
        comm.all_reduce_in_place(&mut x.slice_mut(..len), &ReduceOp::Sum)
            .map(|_| ())
            .map_err(|e| CudaError::Nccl {
                call: "ncclAllReduce",
                message: format!("{e:?}"),
            })
    }

    /// Aborts the communicator (`ncclCommAbort`, cudarc's drop): the collectives it has
    /// queued end, so the other ranks stop waiting for this one. (cudarc's drop panics when
    /// the abort fails; that is caught, so every rank's abort is tried.)
    fn abort(&self) {
        let comm = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| drop(comm)));
    }
}

impl super::CudaBackend {
    /// Aborts this rank's communicator, if it has one ([`RankComm::abort`]).
    fn leave_split(&self) {
        if let Some(c) = self.comm.get() {
            c.abort();
        }
    }

    /// Makes this backend a rank of the split `comm` belongs to: from now on
    /// [`ferrolm_model::backend::Backend::all_reduce`] sums through it.
    pub(super) fn join(&self, comm: Comm) -> Result<()> {
        self.comm
            .set(RankComm(Mutex::new(Some(comm))))
            .map_err(|_| CudaError::Invalid("this backend is a rank of a split already".into()))
    }

    /// One sum of each size in `widths` (floats) with the other ranks, waited for: NCCL
    /// connects its peers on a collective's first use of a protocol, a host call that blocks
    /// until every rank arrives; done at load, a pass's collectives only queue kernels.
    fn warm_up(&self, widths: &[usize]) -> Result<()> {
        let Some(comm) = self.comm.get() else {
            return Ok(());
        };
        for &n in widths {
            let mut x = self.dev.zeros::<f32>(n)?;
            comm.sum_in_place(&mut x, n)?;
        }
        self.dev.sync()
    }
}

/// A split over GPUs, checked: each rank's shard (its column parts are cut while it loads).
pub struct CudaSplit {
    /// The whole model's shape.
    cfg: Config,
    shards: Vec<Shard>,
}

impl CudaSplit {
    /// The shards of `file`'s model over `ranks` GPUs; the error names what does not split
    /// (a column range that would cut a quantization block included).
    pub fn prepare(file: &GgufFile, ranks: usize) -> ferrolm_model::Result<Self> {
        let cfg = Config::from_gguf(file)?;
        let shards = shards(&cfg, ranks)?;
        // Rank 0's columns cut a block where any rank's would (they are all as wide).
        ColumnCuts::check(&cfg, file, &shards[0])?;
        Ok(Self { cfg, shards })
    }
}

/// How long the other ranks get to stop by themselves once one rank's pass has failed (an
/// error every rank meets, before any collective, ends them all at once) before every
/// communicator is aborted to end the collectives they would otherwise wait in forever.
const STRANDED_AFTER: Duration = Duration::from_secs(5);

/// A model split over GPUs; runs like the whole model, through [`ModelRunner`].
pub struct CudaSplitModel {
    /// The whole model's shape (a rank's own is narrower).
    cfg: Config,
    ranks: Vec<CudaModel>,
}

/// One sequence's KV cache: each rank's, on its GPU, for its own KV heads.
pub struct SplitCudaCache {
    ranks: Vec<CudaCache>,
}

impl CudaSplitModel {
    /// Uploads rank `r`'s parts to `devs[r]` and joins the ranks' communicators; NCCL must
    /// load ([`crate::libs::ensure_nccl`]).
    pub fn load(
        file: &GgufFile,
        split: &CudaSplit,
        devs: &[Arc<CudaDevice>],
    ) -> ferrolm_model::Result<Self> {
        let cuda = |e: CudaError| ModelError::Invalid(format!("CUDA: {e}"));
        if devs.len() != split.shards.len() {
            return Err(ModelError::Invalid(format!(
                "a split over {} ranks was given {} GPUs",
                split.shards.len(),
                devs.len()
            )));
        }
        crate::libs::ensure_nccl().map_err(cuda)?;
        let cfg = split.cfg.clone();
        // Each rank cuts its columns and uploads from its own thread: the GPUs' copies
        // overlap, and each rank's cut columns are freed once uploaded.
        let loaded = on_threads(split.shards.iter().zip(devs), |(s, dev)| {
            let cuts = ColumnCuts::cut(&cfg, file, s)?;
            CudaModel::load_rank(file, dev.clone(), s, &cuts)
        });
        let ranks = (loaded.into_iter())
            .map(|r| r.map_err(|_| ModelError::Invalid("a rank's upload panicked".into()))?)
            .collect::<ferrolm_model::Result<Vec<_>>>()?;
        let streams = devs.iter().map(|d| d.stream().clone()).collect();
        let comms = Comm::from_devices(streams).map_err(|e| {
            cuda(CudaError::Nccl {
                call: "ncclCommInitAll",
                message: format!("{e:?}"),
            })
        })?;
        for (m, comm) in ranks.iter().zip(comms) {
            m.backend.join(comm).map_err(cuda)?;
        }
        // A decode step's rows, a full batch's and a long ubatch's: the protocols a pass uses.
        let widths = [1, 64, 2048].map(|rows| rows * cfg.n_embd);
        for w in on_threads(&ranks, |m| m.backend.warm_up(&widths)) {
            w.map_err(|_| ModelError::Invalid("a rank's NCCL warm-up panicked".into()))?
                .map_err(cuda)?;
        }
        Ok(Self { cfg, ranks })
    }

    /// A cache for `n_ctx` positions of every block, on every rank.
    pub fn new_cache(&self, n_ctx: usize, kv: KvFormat) -> Result<SplitCudaCache> {
        let ranks = self.ranks.iter().map(|m| m.new_cache(n_ctx, kv));
        Ok(SplitCudaCache {
            ranks: ranks.collect::<Result<_>>()?,
        })
    }

    /// The ranks (one a GPU), in rank order.
    pub fn ranks(&self) -> &[CudaModel] {
        &self.ranks
    }

    /// Every rank's pool, as [`CudaModel::reserve_kv`] (the ranks' caches are the same size:
    /// their KV heads split evenly).
    pub fn reserve_kv(&self, n_blocks: usize, n_ctx: usize, kv: KvFormat) -> Result<()> {
        (self.ranks.iter()).try_for_each(|m| m.reserve_kv(n_blocks, n_ctx, kv))
    }

    /// The blocks every rank's free memory holds.
    pub fn kv_blocks_that_fit(&self, kv: KvFormat, n_ctx: usize) -> Result<usize> {
        let fits = self.ranks.iter().map(|m| m.kv_blocks_that_fit(kv, n_ctx));
        fits.collect::<Result<Vec<_>>>()
            .map(|f| f.into_iter().min().unwrap_or(0))
    }

    /// The fewest free blocks of any rank's pool, and positions a block.
    pub fn kv_free_blocks(&self) -> Option<(usize, usize)> {
        let free = self.ranks.iter().map(|m| m.kv_free_blocks());
        free.collect::<Option<Vec<_>>>()?.into_iter().min()
    }

    /// [`CudaModel::copy_cache_prefix`] on every rank.
    pub fn copy_cache_prefix(
        &self,
        src: &SplitCudaCache,
        dst: &mut SplitCudaCache,
        n: usize,
    ) -> Result<()> {
        let caches = src.ranks.iter().zip(&mut dst.ranks);
        (self.ranks.iter().zip(caches)).try_for_each(|(m, (s, d))| m.copy_cache_prefix(s, d, n))
    }
}

impl SplitCudaCache {
    pub fn n_ctx(&self) -> usize {
        self.ranks[0].n_ctx()
    }

    /// Rank 0's KV blocks held (every rank holds as many), and positions a block.
    pub fn kv_blocks(&self) -> (usize, usize) {
        self.ranks[0].kv_blocks()
    }

    /// [`CudaCache::truncate`] on every rank.
    pub fn truncate(&mut self, n: usize) {
        self.ranks.iter_mut().for_each(|c| c.truncate(n));
    }
}

impl ModelRunner for CudaSplitModel {
    type Cache = SplitCudaCache;
    type Error = CudaError;
    type Logits = HostLogits;

    fn config(&self) -> &Config {
        &self.cfg
    }

    /// Every rank queues the pass from its own thread (a collective waits for all ranks'
    /// launches); after the last sum every rank holds the same residual stream and so the
    /// same logits: rank 0's are returned.
    fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, SplitCudaCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> Result<HostLogits> {
        let Some(mut per_rank) = by_rank(seqs, self.ranks.len(), |c| &mut c.ranks[..]) else {
            return Err(CudaError::Invalid(
                "a cache made for another split was passed to this model".into(),
            ));
        };
        // Every rank's cache blocks first: a full pool (the same on every rank) then fails
        // the pass before any rank queues a collective, and the split goes on.
        for seqs in per_rank.iter_mut() {
            prepare_writes(seqs, pass)?;
        }
        let ranks = &self.ranks;
        let (done, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
        let (done, failed) = (&done, &failed);
        let results = std::thread::scope(|scope| {
            let running: Vec<_> = (ranks.iter().zip(&mut per_rank))
                .map(|(m, seqs)| {
                    scope.spawn(move || {
                        let pass = AssertUnwindSafe(|| m.forward_rows(seqs, pass, logit_rows));
                        let r = std::panic::catch_unwind(pass);
                        done.fetch_add(1, Ordering::AcqRel);
                        if !matches!(r, Ok(Ok(_))) && !failed.swap(true, Ordering::AcqRel) {
                            scope.spawn(move || watch_stranded(ranks, done));
                        }
                        r
                    })
                })
                .collect();
            let joined = running.into_iter().map(|t| t.join());
            joined.collect::<Vec<_>>()
        });
        let mut logits = None;
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(Ok(l))) if rank == 0 => logits = Some(l),
                Ok(Ok(Ok(l))) => self.ranks[rank].recycle_logits(l),
                Ok(Ok(Err(e))) => return Err(e),
                _ => return Err(CudaError::Invalid(format!("rank {rank}'s pass panicked"))),
            }
        }
        logits.ok_or_else(|| CudaError::Invalid("a split without ranks".into()))
    }

    fn recycle_logits(&self, logits: HostLogits) {
        if let Some(m) = self.ranks.first() {
            m.recycle_logits(logits);
        }
    }
}

/// After a rank's pass failed: when the other ranks have not all stopped within
/// [`STRANDED_AFTER`], they wait in a collective the failed rank will never join, and every
/// communicator is aborted (the split then refuses further passes); when they have, nothing
/// is aborted and the split goes on.
fn watch_stranded(ranks: &[CudaModel], done: &AtomicUsize) {
    let started = Instant::now();
    while done.load(Ordering::Acquire) < ranks.len() {
        if started.elapsed() > STRANDED_AFTER {
            ranks.iter().for_each(|m| m.backend.leave_split());
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
