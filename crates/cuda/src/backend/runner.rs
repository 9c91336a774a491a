//! A model on the GPU: weights uploaded after a fit check, caches, and forward passes, with
//! single-token decode steps captured once per cache as a CUDA graph and replayed.

use super::{CudaAct, CudaBackend, CudaWeight};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::ops::{DecodeWork, KvCache};
use crate::plan::Plan;
use cudarc::driver::{sys, CudaGraph};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::Backend;
use ferrolm_model::backend::{MoeGating, SeqRows};
use ferrolm_model::forward::{forward, head, layers, moe_gating};
use ferrolm_model::tensor_specs;
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::{Config, ModelError};
use std::sync::Arc;

/// Whether decode steps are replayed as graphs: as the plan says (`FERROLM_CUDA_GRAPH=0` runs
/// every step op by op, for bisecting; profiling too), and never while dumping activations.
fn graphs_enabled(plan: &Plan) -> bool {
    plan.graphs() && std::env::var_os("FERROLM_DUMP_DIR").is_none()
}

/// Headroom kept free beyond the weights: activations, the cuBLAS-free kernels' scratch, and
/// the driver's own needs.
const RESERVE_BYTES: u64 = 512 << 20;

pub struct CudaModel {
    pub cfg: Config,
    backend: CudaBackend,
    weights: ModelWeights<CudaWeight>,
    /// Blocks before this one stay on the CPU (`-ngl`); the GPU holds the rest and the head.
    first_layer: usize,
}

/// A decode step captured for one cache: replaying it reruns the whole token.
struct DecodeGraph {
    graph: CudaGraph,
    /// The logits buffer the graph writes; held out of the pool while the graph lives.
    logits: CudaAct,
}

// SAFETY: a graph is used only through the cache that owns it, and a cache is used by one
// thread at a time (`&mut`); the driver requires no more than that serialization.
unsafe impl Send for DecodeGraph {}

/// Every layer's f16 KV cache for one sequence, its decode scratch, and its decode graph.
pub struct CudaCache {
    /// Blocks `first_layer..`: `layers[i]` is block `first_layer + i`.
    pub(super) layers: Vec<KvCache>,
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
        let cfg = Config::from_gguf(file)?;
        let first_layer = first_layer.min(cfg.n_layer);
        check_fit(&cfg, file, &dev, first_layer)?;
        let cuda = |e: CudaError| ModelError::Invalid(format!("CUDA: {e}"));
        let backend = CudaBackend::new(dev.clone()).map_err(cuda)?;
        let renorm = moe_gating(cfg.arch) == MoeGating::SoftmaxTopKRenorm;
        let n_used = cfg.moe.as_ref().map_or(0, |m| m.n_expert_used);
        let weights = ModelWeights::load(&cfg, file, |name, ty, dims, data| {
            if !on_gpu(&cfg, name, first_layer) {
                Ok(CudaWeight::Absent)
            } else if name.ends_with("ffn_gate_inp.weight") {
                super::weights::upload_router(&dev, name, ty, dims, data, n_used, renorm)
            } else {
                super::weights::upload(&dev, name, ty, dims, data)
            }
        })?;
        dev.sync().map_err(cuda)?;
        // The fused norms quantize for the projections that follow them (K-quants: Q8_K).
        let first_proj = ["attn_q", "attn_qkv", "ffn_gate"]
            .iter()
            .find_map(|t| file.tensor(&format!("blk.{first_layer}.{t}.weight")));
        if let Some(q) = first_proj {
            let cols = q.dims.first().map_or(0, |&c| c as usize);
            backend.set_norm_quant(backend.plan().act_quant(q.ty, cols));
        }
        Ok(Self {
            cfg,
            backend,
            weights,
            first_layer,
        })
    }

    pub fn first_layer(&self) -> usize {
        self.first_layer
    }

    pub fn device(&self) -> &CudaDevice {
        self.backend.device()
    }

    /// A cache for `n_ctx` positions; a clear error when it does not fit.
    pub fn new_cache(&self, n_ctx: usize) -> Result<CudaCache> {
        let cfg = &self.cfg;
        let dev = self.backend.device();
        let n_layer = cfg.n_layer - self.first_layer;
        let need = (n_layer * n_ctx * cfg.n_head_kv * (cfg.head_dim + cfg.head_dim_v) * 2) as u64;
        let (free, _) = dev.context().mem_get_info().during("reading free memory")?;
        if need + RESERVE_BYTES / 2 > free as u64 {
            return Err(CudaError::Invalid(format!(
                "a KV cache of {n_ctx} positions needs {} of GPU memory, {} is free; lower -c",
                gib(need),
                gib(free as u64)
            )));
        }
        let layers = (0..n_layer)
            .map(|_| KvCache::new(dev, n_ctx, cfg.n_head_kv, cfg.head_dim))
            .collect::<Result<_>>()?;
        Ok(CudaCache {
            layers,
            first_layer: self.first_layer,
            n_ctx,
            work: self.backend.decode_work(cfg.n_head, cfg.head_dim, n_ctx)?,
            graph: None,
            eager_decodes: 0,
            graph_failed: false,
        })
    }

    /// Logits `[logit_rows.len()][n_vocab]` for a batch of sequences (`seqs`, each its cache
    /// and its rows of `tokens`, at `positions`). A single sequence's one-token step is
    /// captured as a graph on its second occurrence for that cache and replayed after.
    pub fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        tokens: &[u32],
        positions: &[u32],
        logit_rows: &[usize],
    ) -> Result<Vec<f32>> {
        if self.first_layer > 0 {
            return Err(CudaError::Invalid(
                "this model's first blocks run on the CPU: use forward_from_host".into(),
            ));
        }
        self.backend.set_inputs(tokens, positions)?;
        if let [only] = seqs {
            let cache = &mut *only.cache;
            let is_step = tokens.len() == 1 && logit_rows == [0];
            if is_step && graphs_enabled(self.backend.plan()) && !cache.graph_failed {
                if let Some(g) = &cache.graph {
                    g.graph.launch().during("replaying the decode graph")?;
                    return self.read_logits(&g.logits);
                }
                if cache.eager_decodes >= 1 {
                    return self.capture_step(cache, tokens, positions);
                }
                cache.eager_decodes += 1;
            }
        }
        let logits = self.run(seqs, tokens, positions, logit_rows);
        self.read_logits(&logits)
    }

    /// The blocks from [`Self::first_layer`] and the head, for a residual stream `x` (rows of
    /// `n_embd` floats) computed on the CPU by the blocks before. No graphs: each step uploads
    /// its stream.
    pub fn forward_from_host(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        x: &[f32],
        tokens: &[u32],
        positions: &[u32],
        logit_rows: &[usize],
    ) -> Result<Vec<f32>> {
        let b = &self.backend;
        b.set_inputs(tokens, positions)?;
        let mut act = b.act_from_host(x, tokens.len(), self.cfg.n_embd)?;
        let (cfg, w) = (&self.cfg, &self.weights);
        layers(
            b,
            cfg,
            w,
            seqs,
            &mut act,
            positions,
            self.first_layer..cfg.n_layer,
        );
        let logits = head(b, cfg, w, &act, logit_rows);
        self.read_logits(&logits)
    }

    /// The trait's host positions go along; the CUDA ops read the device copy set before.
    fn run(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        tokens: &[u32],
        positions: &[u32],
        rows: &[usize],
    ) -> CudaAct {
        forward(
            &self.backend,
            &self.cfg,
            &self.weights,
            seqs,
            tokens,
            positions,
            rows,
        )
    }

    fn read_logits(&self, logits: &CudaAct) -> Result<Vec<f32>> {
        let host = self.backend.to_host(logits);
        match self.backend.take_error() {
            Some(e) => Err(e),
            None => Ok(host),
        }
    }

    /// Captures one decode step, then replays it (capture only records).
    fn capture_step(
        &self,
        cache: &mut CudaCache,
        tokens: &[u32],
        positions: &[u32],
    ) -> Result<Vec<f32>> {
        let b = &self.backend;
        let stream = b.device().stream().clone();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .during("starting graph capture")?;
        b.set_capturing(true);
        let logits = self.run(
            &mut [SeqRows { cache, rows: 0..1 }],
            tokens,
            positions,
            &[0],
        );
        b.set_capturing(false);
        let captured = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        let failed = b.take_error();
        match (captured, failed) {
            (Ok(Some(graph)), None) => {
                graph.launch().during("launching the decode graph")?;
                let g = cache.graph.insert(DecodeGraph { graph, logits });
                self.read_logits(&g.logits)
            }
            // Whatever went wrong, the step is still owed: run it op by op, and stop trying
            // to capture for this cache.
            _ => {
                cache.graph_failed = true;
                drop(logits);
                let logits = self.run(
                    &mut [SeqRows { cache, rows: 0..1 }],
                    tokens,
                    positions,
                    &[0],
                );
                self.read_logits(&logits)
            }
        }
    }
}

/// Fails with how many layers would fit when the weights do not fit in free device memory.
fn check_fit(
    cfg: &Config,
    file: &GgufFile,
    dev: &CudaDevice,
    first_layer: usize,
) -> ferrolm_model::Result<()> {
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
        if !on_gpu(cfg, &spec.name, first_layer) {
            continue;
        }
        let bytes = super::weights::device_bytes(&spec.name, info.ty, &info.dims);
        total += bytes;
        if let Some(layer) = layer_of(&spec.name) {
            if layer < cfg.n_layer {
                per_layer[layer] += bytes;
            }
        }
    }
    let free = free as u64;
    if total + RESERVE_BYTES <= free {
        return Ok(());
    }
    let outside: u64 = total - per_layer.iter().sum::<u64>();
    let fits = layers_that_fit(&per_layer, outside + RESERVE_BYTES, free);
    Err(ModelError::Invalid(format!(
        "the model needs {} of GPU memory for its weights, {} is free on {}: about {fits} of {} \
         layers would fit (-ngl {fits})",
        gib(total + RESERVE_BYTES),
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

/// Whether tensor `name` is uploaded when blocks `first_layer..` run on the GPU.
fn on_gpu(cfg: &Config, name: &str, first_layer: usize) -> bool {
    match layer_of(name) {
        Some(layer) => layer >= first_layer,
        // The embedding is looked up on the CPU when blocks run there, unless it is also the
        // output projection.
        None if name == "token_embd.weight" => first_layer == 0 || cfg.tied_embeddings,
        None => true,
    }
}

/// `blk.N.…` → N.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{layer_of, layers_that_fit};

    #[test]
    fn fit_counts_whole_layers() {
        assert_eq!(layers_that_fit(&[10, 10, 10], 5, 100), 3);
        assert_eq!(layers_that_fit(&[10, 10, 10], 5, 26), 2);
        assert_eq!(layers_that_fit(&[10, 10, 10], 5, 14), 0);
        assert_eq!(layers_that_fit(&[10, 10, 10], 50, 14), 0);
    }

    #[test]
    fn layer_numbers_from_names() {
        assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(layer_of("output.weight"), None);
        assert_eq!(layer_of("blk.x.attn_q.weight"), None);
    }
}
