//! A model on the GPU ([`CudaModel`]): weights uploaded after a fit check, caches, and forward
//! passes, with single-token decode steps captured once per cache as a CUDA graph and
//! replayed. The same shape as the CPU's `CpuModel`, behind [`ModelRunner`].

use super::batch_graph::BatchGraphs;
use super::{CudaAct, CudaBackend, CudaInputs, CudaWeight};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::host_logits::HostLogits;
use crate::ops::{BlockTable, DecodeWork, KvCache, KvFormat, KvPool, L2AheadHow, L2AheadTable};
use crate::plan::Plan;
use cudarc::driver::{sys, CudaGraph};
use ferrolm_gguf::{GgmlType, GgufFile};
use ferrolm_model::backend::{Backend, PassInputs, SeqRows};
use ferrolm_model::dump::{dump_dir_from_env, Dump};
use ferrolm_model::forward::{embed, forward, head, layers, moe_gating};
use ferrolm_model::split::{ColumnCuts, Shard};
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::{tensor_specs, TensorId, TensorRole};
use ferrolm_model::{Config, GreedyPick, ModelError, ModelRunner};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// How a pass brings back its logits: `(logits, rows)` → the first `rows` rows to the host,
/// or their greedy picks.
pub(super) type ReadLogits<'a, T> = dyn Fn(&CudaAct, usize) -> Result<T> + 'a;

/// Whether decode steps are replayed as graphs: as the plan says (`FERROLM_CUDA_GRAPH=0` runs
/// every step op by op, for bisecting; profiling too), and never while dumping activations.
fn graphs_enabled(plan: &Plan, dumping: bool) -> bool {
    plan.graphs() && !dumping
}

/// Headroom kept free beyond the weights: activations, the cuBLAS-free kernels' scratch, and
/// the driver's own needs.
const RESERVE_BYTES: u64 = 512 << 20;

pub struct CudaModel {
    pub cfg: Config,
    pub(super) backend: CudaBackend,
    weights: ModelWeights<CudaWeight>,
    /// Blocks before this one stay on the CPU (`-ngl`) or on another GPU (`--split-mode
    /// layer`); this GPU holds blocks `first_layer..end_layer`, and the head when `end_layer`
    /// is the last.
    pub(super) first_layer: usize,
    end_layer: usize,
    /// `FERROLM_DUMP_DIR`, read at load: every pass then runs through [`Dump`], op by op.
    pub(super) dump: Option<PathBuf>,
    /// Multi-sequence decode steps captured as graphs (`batch_graph.rs`).
    pub(super) batch_graphs: Mutex<BatchGraphs>,
    /// The KV pool sequences share ([`Self::reserve_kv`]); without one, each cache has a pool
    /// of its own.
    shared_kv: Mutex<Option<Arc<KvPool>>>,
    /// What the L2 prefetch beside a captured step asks for (`l2_ahead.rs`), made at the first
    /// capture with the prefetch; `None` for a model whose layers do not all route.
    l2_table: OnceLock<Option<L2AheadTable>>,
}

/// A decode step captured for one cache: replaying it reruns the whole token.
struct DecodeGraph {
    graph: CudaGraph,
    /// The token id and position the graph reads, rewritten before each replay; held out of
    /// the pool while the graph lives, as is the logits buffer it writes.
    inputs: CudaInputs,
    logits: CudaAct,
}

// SAFETY: a graph is used only through the cache that owns it, and a cache is used by one
// thread at a time (`&mut`); the driver requires no more than that serialization.
unsafe impl Send for DecodeGraph {}

/// Every layer's KV cache for one sequence (f16, f32, q8_0 or q4_0), its decode scratch, and its
/// decode graph.
pub struct CudaCache {
    /// Blocks `first_layer..`: `layers[i]` is block `first_layer + i`, each a view of the pool
    /// through `table` (declared first: views go before the table they point into).
    pub(super) layers: Vec<KvCache>,
    /// The sequence's blocks in its pool.
    pub(super) table: BlockTable,
    pub(super) first_layer: usize,
    n_ctx: usize,
    pub(super) work: DecodeWork,
    graph: Option<DecodeGraph>,
    /// Single-token steps run so far without a graph: the first fills the buffer pools, the
    /// second is captured.
    eager_decodes: usize,
    graph_failed: bool,
}

impl CudaCache {
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// KV blocks this sequence holds, and positions a block.
    pub fn kv_blocks(&self) -> (usize, usize) {
        (self.table.n_blocks(), self.table.pool().block())
    }

    /// Keeps positions `..n` only: the blocks past them go back to the pool (a server slot
    /// reused for a prompt that shares `n` tokens with what it held).
    pub fn truncate(&mut self, n: usize) {
        self.table.truncate(n);
    }

    /// Blocks for the positions a pass writes into this cache, taken before its kernels are
    /// queued (and before a graph replays).
    pub(super) fn prepare_write(&mut self, positions: &[u32]) -> Result<()> {
        let (Some(&lo), Some(&hi)) = (positions.iter().min(), positions.iter().max()) else {
            return Ok(());
        };
        self.table.prepare_write(lo as usize, hi as usize + 1)
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

impl CudaModel {
    /// Uploads every weight of `file`, after checking that they fit in free device memory.
    pub fn load(file: &GgufFile, dev: Arc<CudaDevice>) -> ferrolm_model::Result<Self> {
        Self::load_from_layer(file, dev, 0)
    }

    /// Uploads blocks `first_layer..` and the head (output norm and projection); the token
    /// embedding too when it is the tied output matrix. The caller runs the first blocks on
    /// the CPU and hands the residual stream over ([`Self::forward_from_host`]).
    pub fn load_from_layer(
        file: &GgufFile,
        dev: Arc<CudaDevice>,
        first_layer: usize,
    ) -> ferrolm_model::Result<Self> {
        Self::load_part(file, dev, first_layer..usize::MAX, Part::Blocks)
    }

    /// Uploads blocks `blocks` (the embedding with the first, the head with the last): one
    /// stage of a split by layer, which runs them with [`Self::forward_stage`] (the last
    /// stage with [`Self::forward_from_host`]).
    pub fn load_blocks(
        file: &GgufFile,
        dev: Arc<CudaDevice>,
        blocks: Range<usize>,
    ) -> ferrolm_model::Result<Self> {
        Self::load_part(file, dev, blocks, Part::Stage)
    }

    /// Rank `shard` of a tensor split ([`ferrolm_model::split`]): its parts of every weight
    /// (`cuts`: its column parts), in its own shape. Its backend sums with the other ranks
    /// once it joins their communicator ([`CudaBackend::join`]).
    pub fn load_rank(
        file: &GgufFile,
        dev: Arc<CudaDevice>,
        shard: &Shard,
        cuts: &ColumnCuts,
    ) -> ferrolm_model::Result<Self> {
        Self::load_part(file, dev, 0..usize::MAX, Part::Rank(shard, cuts))
    }

    fn load_part(
        file: &GgufFile,
        dev: Arc<CudaDevice>,
        blocks: Range<usize>,
        part: Part<'_>,
    ) -> ferrolm_model::Result<Self> {
        let shard = match part {
            Part::Rank(s, cuts) => Some((s, cuts)),
            _ => None,
        };
        let whole = Config::from_gguf(file)?;
        let end_layer = blocks.end.min(whole.n_layer);
        let first_layer = blocks.start.min(end_layer);
        let blocks = first_layer..end_layer;
        check_fit(&whole, file, &dev, &blocks, &part)?;
        let cuda = |e: CudaError| ModelError::Invalid(format!("CUDA: {e}"));
        let backend = CudaBackend::new(dev.clone()).map_err(cuda)?;
        // The same gating the weights carry (`MoeWeights::gating`), which the router applies.
        let gating = moe_gating(whole.arch);
        let n_used = whole.moe.as_ref().map_or(0, |m| m.n_expert_used);
        // The first block's query projection: what the fused norms quantize for.
        let first_q = TensorId::block(first_layer, TensorRole::AttnQ);
        let mut first_proj: Option<(GgmlType, usize)> = None;
        let upload = |id, ty, dims: &[u64], data: &[u8]| {
            if id == first_q {
                first_proj = Some((ty, dims.first().map_or(0, |&c| c as usize)));
            }
            if !on_gpu(&whole, id, &blocks) {
                Ok(CudaWeight::Absent)
            } else if id.role == TensorRole::FfnGateInp {
                super::weights::upload_router(&dev, id, ty, dims, data, n_used, gating)
            } else {
                super::weights::upload(&dev, id, ty, dims, data)
            }
        };
        let (cfg, weights) = match shard {
            None => (whole.clone(), ModelWeights::load(&whole, file, upload)?),
            Some((s, cuts)) => (
                s.config(&whole),
                s.load_weights(&whole, file, cuts, upload)?,
            ),
        };
        dev.sync().map_err(cuda)?;
        // The fused norms quantize for the projections that follow them (K-quants: Q8_K).
        if let Some((ty, cols)) = first_proj {
            backend.set_norm_quant(backend.plan().act_quant(ty, cols));
        }
        Ok(Self {
            cfg,
            backend,
            weights,
            first_layer,
            end_layer,
            dump: dump_dir_from_env(),
            batch_graphs: Mutex::default(),
            shared_kv: Mutex::default(),
            l2_table: OnceLock::new(),
        })
    }

    pub fn first_layer(&self) -> usize {
        self.first_layer
    }

    /// The blocks this GPU holds.
    pub fn blocks(&self) -> Range<usize> {
        self.first_layer..self.end_layer
    }

    /// Whether this GPU holds every block and the head (no part elsewhere).
    fn whole(&self) -> bool {
        self.first_layer == 0 && self.end_layer == self.cfg.n_layer
    }

    pub fn device(&self) -> &CudaDevice {
        self.backend.device()
    }

    /// Bytes one position of a [`Self::new_cache`] cache in `kv` takes: keys and values of
    /// the blocks on this GPU (quantized: whole blocks).
    pub fn kv_bytes_per_position(&self, kv: KvFormat) -> u64 {
        let cfg = &self.cfg;
        let n_layer = self.end_layer - self.first_layer;
        // Values as wide as keys: the cache holds them so (deepseek2's are padded).
        (n_layer * cfg.n_head_kv * 2 * kv.row_bytes(cfg.head_dim)) as u64
    }

    /// Positions a block of the paged KV cache for sequences of up to `n_ctx` (the plan's).
    pub fn kv_block(&self, n_ctx: usize) -> usize {
        self.backend.plan().kv_block(n_ctx)
    }

    /// Whether sequences may share a pool ([`Self::reserve_kv`]; the plan's `kv_pool`).
    pub fn shares_kv(&self) -> bool {
        self.backend.plan().kv_pool()
    }

    /// Makes the pool that the caches made after it share: `n_blocks` blocks of
    /// [`Self::kv_block`] positions in `kv`, for sequences of up to `n_ctx`; a clear error
    /// when they do not fit. Each cache then takes blocks as its sequence grows, up to its own
    /// `n_ctx`; a pass that finds the pool empty fails with an error that says so. Nothing
    /// when the plan keeps a pool a cache ([`Self::shares_kv`]).
    pub fn reserve_kv(&self, n_blocks: usize, n_ctx: usize, kv: KvFormat) -> Result<()> {
        if !self.shares_kv() {
            return Ok(());
        }
        let mut shared = self.shared_kv.lock().unwrap_or_else(|p| p.into_inner());
        // The old pool goes first (freed now unless caches still hold it): not two at once.
        *shared = None;
        let block = self.kv_block(n_ctx);
        *shared = Some(Arc::new(self.new_pool(n_blocks.max(1), block, kv)?));
        Ok(())
    }

    /// The blocks that fit in free GPU memory as a pool in `kv`, beside what stays free for
    /// activations, graphs and the driver (a tenth of it, and the reserve).
    pub fn kv_blocks_that_fit(&self, kv: KvFormat, n_ctx: usize) -> Result<usize> {
        let (free, _) = self
            .backend
            .device()
            .context()
            .mem_get_info()
            .during("reading free memory")?;
        let usable = (free as u64 / 10 * 9).saturating_sub(RESERVE_BYTES);
        let per_block = self.kv_bytes_per_position(kv).max(1) * self.kv_block(n_ctx) as u64;
        Ok((usable / per_block) as usize)
    }

    /// Blocks free in the shared pool, and positions a block (`None` without one).
    pub fn kv_free_blocks(&self) -> Option<(usize, usize)> {
        let pool = self.shared_kv.lock().unwrap_or_else(|p| p.into_inner());
        pool.as_ref().map(|p| (p.free_blocks(), p.block()))
    }

    fn new_pool(&self, n_blocks: usize, block: usize, kv: KvFormat) -> Result<KvPool> {
        let cfg = &self.cfg;
        let dev = self.backend.device();
        let n_layer = self.end_layer - self.first_layer;
        let need = self.kv_bytes_per_position(kv) * (n_blocks * block) as u64;
        let (free, _) = dev.context().mem_get_info().during("reading free memory")?;
        if need + RESERVE_BYTES / 2 > free as u64 {
            return Err(CudaError::Invalid(format!(
                "a KV cache of {} positions needs {} of GPU memory, {} is free; lower -c",
                n_blocks * block,
                gib(need),
                gib(free as u64)
            )));
        }
        KvPool::new(
            dev,
            kv,
            n_layer,
            cfg.n_head_kv,
            cfg.head_dim,
            block,
            n_blocks,
        )
    }

    /// A cache for `n_ctx` positions in `kv`: blocks of the shared pool as it grows when
    /// [`Self::reserve_kv`] made one in `kv`, else a pool of its own that holds all `n_ctx`
    /// (a clear error when it does not fit).
    pub fn new_cache(&self, n_ctx: usize, kv: KvFormat) -> Result<CudaCache> {
        let cfg = &self.cfg;
        let dev = self.backend.device();
        let shared = self
            .shared_kv
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|p| p.format == kv);
        let pool = match shared {
            Some(p) => p,
            None => {
                let block = self.kv_block(n_ctx);
                Arc::new(self.new_pool(n_ctx.div_ceil(block).max(1), block, kv)?)
            }
        };
        let table = BlockTable::new(dev, pool, n_ctx)?;
        let layers = (0..table.pool().n_layer())
            .map(|l| KvCache::view(&table, l))
            .collect();
        Ok(CudaCache {
            layers,
            table,
            first_layer: self.first_layer,
            n_ctx,
            work: self
                .backend
                .decode_work(cfg.n_head, cfg.n_head_kv, cfg.head_dim, n_ctx)?,
            graph: None,
            eager_decodes: 0,
            graph_failed: false,
        })
    }

    /// Positions `0..n` of `src` given to `dst` (caches of this model, one format and size): a
    /// shared prompt's keys and values given to another sequence. Caches of one pool share
    /// the blocks (copied only when one of them writes into a shared block); else copied.
    pub fn copy_cache_prefix(&self, src: &CudaCache, dst: &mut CudaCache, n: usize) -> Result<()> {
        if src.n_ctx != dst.n_ctx || n > src.n_ctx || src.layers.len() != dst.layers.len() {
            return Err(CudaError::Invalid(format!(
                "copying {n} positions between caches of {} and {} positions",
                src.n_ctx, dst.n_ctx
            )));
        }
        // The tables check the formats, and that src holds n positions.
        dst.table.take_prefix(&src.table, n)
    }

    /// The blocks from [`Self::first_layer`] and the head, for a residual stream `x` (rows of
    /// `n_embd` floats) computed on the CPU by the blocks before. No graphs: each step uploads
    /// its stream.
    pub fn forward_from_host(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        x: &[f32],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> Result<HostLogits> {
        if self.end_layer < self.cfg.n_layer {
            return Err(CudaError::Invalid(
                "this GPU's blocks end before the head: use forward_stage".into(),
            ));
        }
        let b = &self.backend;
        b.set_multi_seq(seqs.len() > 1);
        prepare_writes(seqs, pass)?;
        let mut inp = b.inputs(pass)?;
        inp.rows_table = b.rows_table(seqs, pass.positions, self.cfg.n_head)?;
        let mut act = b.act_from_host(x, pass.rows(), self.cfg.n_embd)?;
        let blocks = self.blocks();
        let logits = match &self.dump {
            Some(dir) => {
                let d = Dump::new(b, dir);
                blocks_and_head(&d, self, seqs, &mut act, &inp, blocks, logit_rows)
            }
            None => blocks_and_head(b, self, seqs, &mut act, &inp, blocks, logit_rows),
        }?;
        self.backend.rows_to_host(&logits, logits.rows)
    }

    /// One stage of a split by layer, for a stage before the last: the embedding of the
    /// pass's tokens (the first stage, `x` None) or the residual stream `x` from the stage
    /// before, through this GPU's blocks, back to the host for the next. No graphs.
    pub fn forward_stage(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        x: Option<&[f32]>,
        pass: &PassInputs<'_>,
    ) -> Result<Vec<f32>> {
        let b = &self.backend;
        b.set_multi_seq(seqs.len() > 1);
        prepare_writes(seqs, pass)?;
        let mut inp = b.inputs(pass)?;
        inp.rows_table = b.rows_table(seqs, pass.positions, self.cfg.n_head)?;
        let (cfg, w) = (&self.cfg, &self.weights);
        let mut act = match x {
            Some(x) => b.act_from_host(x, pass.rows(), cfg.n_embd)?,
            None if self.first_layer == 0 => embed(b, cfg, w, &inp)?,
            None => {
                return Err(CudaError::Invalid(
                    "a stage after the first needs the residual stream from the one before".into(),
                ))
            }
        };
        match &self.dump {
            Some(dir) => layers(
                &Dump::new(b, dir),
                cfg,
                w,
                seqs,
                &mut act,
                &inp,
                self.blocks(),
            ),
            None => layers(b, cfg, w, seqs, &mut act, &inp, self.blocks()),
        }?;
        b.to_host(&act)
    }

    /// The whole pass on the backend (through [`Dump`] when dumping).
    pub(super) fn run(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        inp: &CudaInputs,
        rows: &[usize],
    ) -> Result<CudaAct> {
        let (cfg, w) = (&self.cfg, &self.weights);
        self.backend.set_multi_seq(seqs.len() > 1);
        match &self.dump {
            Some(dir) => forward(&Dump::new(&self.backend, dir), cfg, w, seqs, inp, rows),
            None => forward(&self.backend, cfg, w, seqs, inp, rows),
        }
    }

    /// A pass over `seqs`, its logits brought back by `read` (to the host, or the greedy
    /// picks of them). A single sequence's one-token step is captured as a graph on its second
    /// occurrence for that cache and replayed after, with the step's token and position
    /// rewritten; a step of several sequences likewise per padded batch size
    /// (`batch_graph.rs`). Other passes of several sequences carry a rows table, so their
    /// decode rows take one attention launch a layer (`rows.rs`).
    fn forward_read<T>(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
        read: &ReadLogits<'_, T>,
    ) -> Result<T> {
        if !self.whole() {
            return Err(CudaError::Invalid(
                "this GPU holds some of the blocks: use forward_stage or forward_from_host".into(),
            ));
        }
        prepare_writes(seqs, pass)?;
        if let [only] = seqs {
            let cache = &mut *only.cache;
            let is_step = pass.rows() == 1 && logit_rows == [0];
            if is_step
                && graphs_enabled(self.backend.plan(), self.dump.is_some())
                && !cache.graph_failed
            {
                if let Some(g) = &mut cache.graph {
                    g.inputs.write(self.backend.device().stream(), pass)?;
                    g.graph.launch().during("replaying the decode graph")?;
                    return read(&g.logits, 1);
                }
                if cache.eager_decodes >= 1 {
                    return self.capture_step(cache, pass, read);
                }
                cache.eager_decodes += 1;
            }
        }
        if let Some(out) = self.batch_step(seqs, pass, logit_rows, read)? {
            return Ok(out);
        }
        let mut inp = self.backend.inputs(pass)?;
        inp.rows_table = self
            .backend
            .rows_table(seqs, pass.positions, self.cfg.n_head)?;
        let logits = self.run(seqs, &inp, logit_rows)?;
        read(&logits, logits.rows)
    }

    /// The L2 prefetch's table and how it asks, for a captured step where the plan takes it
    /// (`FERROLM_L2_AHEAD`) and every layer routes; made at the first call.
    fn l2_ahead_table(&self) -> Result<Option<(&L2AheadTable, L2AheadHow)>> {
        let Some(how) = self.backend.plan().l2_ahead() else {
            return Ok(None);
        };
        if self.l2_table.get().is_none() {
            let dev = self.backend.device();
            let table = match super::l2_ahead::table_groups(&self.weights, dev.stream()) {
                Some(groups) => Some(L2AheadTable::new(dev, &groups)?),
                None => None,
            };
            // One thread captures a cache's step at a time; a table made twice is the same.
            let _ = self.l2_table.set(table);
        }
        Ok(self
            .l2_table
            .get()
            .and_then(Option::as_ref)
            .map(|t| (t, how)))
    }

    /// Captures one decode step, then replays it (capture only records). The inputs are
    /// copied before the capture starts and stay with the graph.
    fn capture_step<T>(
        &self,
        cache: &mut CudaCache,
        pass: &PassInputs<'_>,
        read: &ReadLogits<'_, T>,
    ) -> Result<T> {
        let b = &self.backend;
        let inputs = b.inputs(pass)?;
        let ahead = self.l2_ahead_table()?;
        let stream = b.device().stream().clone();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .during("starting graph capture")?;
        b.set_capturing(true);
        // An op that fails stops the pass here; the capture still ends before anything else,
        // the prefetch's stream joined back first.
        let ran = match ahead.map(|(table, how)| b.l2_ahead_fork(table, how)) {
            Some(Err(e)) => Err(e),
            _ => self.run(&mut [SeqRows { cache, rows: 0..1 }], &inputs, &[0]),
        };
        let joined = ahead.map(|(table, _)| b.l2_ahead_join(table)).transpose();
        let ran = ran.and_then(|logits| joined.map(|_| logits));
        b.set_capturing(false);
        let captured = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        match (captured, ran) {
            (Ok(Some(graph)), Ok(logits)) => {
                graph.launch().during("launching the decode graph")?;
                let g = cache.graph.insert(DecodeGraph {
                    graph,
                    inputs,
                    logits,
                });
                read(&g.logits, 1)
            }
            // Whatever went wrong, the step is still owed: run it op by op, and stop trying
            // to capture for this cache.
            (_, ran) => {
                cache.graph_failed = true;
                drop(ran);
                let logits = self.run(&mut [SeqRows { cache, rows: 0..1 }], &inputs, &[0])?;
                read(&logits, 1)
            }
        }
    }
}

impl ModelRunner for CudaModel {
    type Cache = CudaCache;
    type Error = CudaError;
    type Logits = HostLogits;

    fn config(&self) -> &Config {
        &self.cfg
    }

    fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> Result<HostLogits> {
        let b = &self.backend;
        self.forward_read(seqs, pass, logit_rows, &|x, rows| b.rows_to_host(x, rows))
    }

    /// Picked on the GPU where the plan says so (`FERROLM_GREEDY_ON_DEVICE=1`): only the
    /// picks cross to the host.
    fn forward_rows_greedy(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
        banned: &[u32],
    ) -> Result<Option<Vec<GreedyPick>>> {
        let b = &self.backend;
        if !b.plan().greedy_on_device() || !self.whole() {
            return Ok(None);
        }
        let read = |x: &CudaAct, rows| b.rows_greedy(x, rows, banned);
        self.forward_read(seqs, pass, logit_rows, &read).map(Some)
    }

    fn recycle_logits(&self, logits: HostLogits) {
        self.backend.recycle_host(logits);
    }
}

/// Blocks for the positions each sequence's rows of `pass` write (before any kernel of the
/// pass is queued: a pool too full fails the pass before it starts).
pub(super) fn prepare_writes(
    seqs: &mut [SeqRows<'_, CudaCache>],
    pass: &PassInputs<'_>,
) -> Result<()> {
    for s in seqs.iter_mut() {
        let positions = pass.positions.get(s.rows.clone()).ok_or_else(|| {
            CudaError::Invalid(format!(
                "a sequence's rows {:?} past the pass's {}",
                s.rows,
                pass.positions.len()
            ))
        })?;
        s.cache.prepare_write(positions)?;
    }
    Ok(())
}

/// Blocks `blocks` over `x`, then the head, on `b` (the backend, or it wrapped in [`Dump`]).
fn blocks_and_head<B>(
    b: &B,
    m: &CudaModel,
    seqs: &mut [SeqRows<'_, CudaCache>],
    x: &mut CudaAct,
    inp: &CudaInputs,
    blocks: Range<usize>,
    logit_rows: &[usize],
) -> Result<CudaAct>
where
    B: Backend<
        Weight = CudaWeight,
        Act = CudaAct,
        Cache = CudaCache,
        Inputs = CudaInputs,
        Error = CudaError,
    >,
{
    layers(b, &m.cfg, &m.weights, seqs, x, inp, blocks)?;
    head(b, &m.cfg, &m.weights, x, logit_rows)
}

/// Fails with how many layers would fit when the weights do not fit in free device memory.
fn check_fit(
    cfg: &Config,
    file: &GgufFile,
    dev: &CudaDevice,
    blocks: &Range<usize>,
    part: &Part<'_>,
) -> ferrolm_model::Result<()> {
    let shard = match part {
        Part::Rank(s, _) => Some(*s),
        _ => None,
    };
    let (free, _) = dev
        .context()
        .mem_get_info()
        .map_err(|e| ModelError::Invalid(format!("CUDA: reading free memory: {e}")))?;
    let mut total = 0u64;
    let mut per_layer = vec![0u64; cfg.n_layer];
    for spec in tensor_specs(cfg) {
        let Some(info) = file.tensor(&spec.name) else {
            continue; // ModelWeights::load reports missing tensors
        };
        if !on_gpu(cfg, spec.id, blocks) {
            continue;
        }
        let dims = shard.map_or(info.dims.clone(), |s| s.part(cfg, spec.id).dims(&info.dims));
        let bytes = super::weights::device_bytes(spec.id, info.ty, &dims);
        total += bytes;
        if let Some(layer) = spec.id.layer {
            if layer < cfg.n_layer {
                per_layer[layer] += bytes;
            }
        }
    }
    let free = free as u64;
    if total + RESERVE_BYTES <= free {
        return Ok(());
    }
    let need = gib(total + RESERVE_BYTES);
    if !matches!(part, Part::Blocks) {
        // A rank or a stage of a split over GPUs: -ngl does not apply there.
        return Err(ModelError::Invalid(format!(
            "this GPU's share of the model needs {need} of GPU memory, {} is free on {}: \
             split it over more GPUs (--tensor-split)",
            gib(free),
            dev.name()
        )));
    }
    let outside: u64 = total - per_layer.iter().sum::<u64>();
    let fits = layers_that_fit(&per_layer, outside + RESERVE_BYTES, free);
    Err(ModelError::Invalid(format!(
        "the model needs {need} of GPU memory for its weights, {} is free on {}: about {fits} of \
         {} layers would fit (-ngl {fits})",
        gib(free),
        dev.name(),
        cfg.n_layer
    )))
}

/// How many layers (from the first, each `per_layer[i]` bytes) fit in `free` bytes beside
/// `fixed` bytes that must be there anyway.
fn layers_that_fit(per_layer: &[u64], fixed: u64, free: u64) -> usize {
    let mut budget = free.saturating_sub(fixed);
    per_layer
        .iter()
        .take_while(|&&b| {
            let ok = b <= budget;
            budget = budget.saturating_sub(b);
            ok
        })
        .count()
}

/// What a [`CudaModel`] holds of its file.
enum Part<'a> {
    /// Blocks from one to the last and the head, the CPU running those before (`-ngl`), or
    /// every block.
    Blocks,
    /// A run of blocks of a split by layer.
    Stage,
    /// A rank of a tensor split: its shard, and its column parts.
    Rank(&'a Shard, &'a ColumnCuts),
}

/// Whether tensor `id` is uploaded when `blocks` run on the GPU.
fn on_gpu(cfg: &Config, id: TensorId, blocks: &Range<usize>) -> bool {
    let (first, last) = (blocks.start == 0, blocks.end == cfg.n_layer);
    match (id.layer, id.role) {
        (Some(layer), _) => blocks.contains(&layer),
        // The embedding is looked up by the first blocks' device (the CPU's for `-ngl`), and
        // is also the output projection when tied.
        (None, TensorRole::TokenEmbd) => first || (last && cfg.tied_embeddings),
        (None, TensorRole::Output | TensorRole::OutputNorm) => last,
        (None, _) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::layers_that_fit;

    #[test]
    fn fit_counts_whole_layers() {
        assert_eq!(layers_that_fit(&[10, 10, 10], 5, 100), 3);
        assert_eq!(layers_that_fit(&[10, 10, 10], 5, 26), 2);
        assert_eq!(layers_that_fit(&[10, 10, 10], 5, 14), 0);
        assert_eq!(layers_that_fit(&[10, 10, 10], 50, 14), 0);
    }
}
