//! Tensor parallel: a model's blocks spread over `ranks` workers, each holding a share of every
//! block's attention heads (by KV group), of the dense FFN's width, and of the experts, with one
//! sum across the ranks (an all-reduce, [`crate::backend::Backend::all_reduce`]) after the
//! attention's output projection and one after the FFN. Everything else (embeddings, norms,
//! the router, the head) every rank holds whole, so the residual stream is the same on every
//! rank and every rank computes the same logits.
//!
//! A rank is a model of its own shape ([`Shard::config`]: fewer heads, a narrower FFN) over
//! slices of the file's tensors ([`Shard::part`]): rows of q, k, v, gate, up and of the expert
//! stacks, which are contiguous in the file, and columns of the output and down projections,
//! which are copied out once ([`ColumnCuts`]). The sum of the ranks' partial outputs equals the
//! whole model's output up to f32 summation order: that is the split's contract.

use crate::arch::Arch;
use crate::backend::SeqRows;
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layout::{tensor_specs, TensorId, TensorRole};
use crate::weights::{Ffn, ModelWeights};
use ferrolm_gguf::{GgmlType, GgufFile};
use std::collections::HashMap;
use std::ops::Range;

/// Rank `rank` of a split over `ranks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub ranks: usize,
}

/// The part of a tensor one rank holds, counted in the tensor's rows (all dimensions after the
/// first, flattened) or in its columns (the first dimension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Whole,
    Rows(Range<usize>),
    Cols(Range<usize>),
}

impl Shard {
    /// Rank `rank` of `ranks`, once the model is known to split that many ways; the error
    /// names what does not split.
    pub fn new(cfg: &Config, rank: usize, ranks: usize) -> Result<Self> {
        let refuse = |what: String| Err(ModelError::Invalid(format!("tensor split: {what}")));
        if ranks == 0 || rank >= ranks {
            return refuse(format!("rank {rank} of {ranks}"));
        }
        match cfg.arch {
            Arch::Deepseek2 => return refuse("deepseek2's latent attention is not split".into()),
            Arch::Olmoe => {
                return refuse(
                    "olmoe's query/key norms span every head, so they are not split".into(),
                )
            }
            _ => {}
        }
        if cfg.biases.ffn {
            return refuse("FFN biases are not split".into());
        }
        // A rank's shape has fewer heads, and this scale is read off the whole model's.
        if cfg.q_scale().is_some() {
            return refuse(
                "gemma3-27b's query scale (from n_embd / n_head of the whole model) is not \
                 split yet"
                    .into(),
            );
        }
        if !cfg.n_head_kv.is_multiple_of(ranks) || !cfg.n_head.is_multiple_of(ranks) {
            return refuse(format!(
                "{} query heads in {} KV groups do not split over {ranks} ranks",
                cfg.n_head, cfg.n_head_kv
            ));
        }
        match &cfg.moe {
            Some(m) if !m.n_expert.is_multiple_of(ranks) => {
                return refuse(format!(
                    "{} experts do not split over {ranks} ranks",
                    m.n_expert
                ))
            }
            None if !cfg.n_ff.is_multiple_of(ranks) => {
                return refuse(format!(
                    "an FFN {} wide does not split over {ranks} ranks",
                    cfg.n_ff
                ))
            }
            _ => {}
        }
        Ok(Self { rank, ranks })
    }

    /// This rank's share of `n` things: an equal run, in rank order.
    fn share(&self, n: usize) -> Range<usize> {
        let each = n / self.ranks;
        self.rank * each..(self.rank + 1) * each
    }

    /// The experts this rank holds (all of them when the model has none).
    pub fn experts(&self, cfg: &Config) -> Range<usize> {
        cfg.moe.as_ref().map_or(0..0, |m| self.share(m.n_expert))
    }

    /// The shape of this rank's model: its share of the heads and of the dense FFN's width.
    /// The experts keep their count (the router still chooses among all of them); which ones
    /// this rank holds is [`Self::experts`].
    pub fn config(&self, cfg: &Config) -> Config {
        let mut c = cfg.clone();
        c.n_head /= self.ranks;
        c.n_head_kv /= self.ranks;
        if cfg.moe.is_none() {
            c.n_ff /= self.ranks;
        }
        c
    }

    /// What this rank holds of tensor `id`.
    pub fn part(&self, cfg: &Config, id: TensorId) -> Part {
        use TensorRole::*;
        let (hd, hdv) = (cfg.head_dim, cfg.head_dim_v);
        let heads = self.share(cfg.n_head);
        let groups = self.share(cfg.n_head_kv);
        let scaled = |r: &Range<usize>, by: usize| r.start * by..r.end * by;
        let experts = self.experts(cfg);
        let n_ff_exp = cfg.moe.as_ref().map_or(0, |m| m.n_ff_exp);
        match id.role {
            AttnQ => Part::Rows(scaled(&heads, hd)),
            AttnK => Part::Rows(scaled(&groups, hd)),
            AttnV => Part::Rows(scaled(&groups, hdv)),
            AttnQBias => Part::Cols(scaled(&heads, hd)),
            AttnKBias => Part::Cols(scaled(&groups, hd)),
            AttnVBias => Part::Cols(scaled(&groups, hdv)),
            AttnOutput => Part::Cols(scaled(&heads, hdv)),
            AttnSinks => Part::Cols(heads),
            FfnGate | FfnUp => Part::Rows(self.share(cfg.n_ff)),
            FfnDown => Part::Cols(self.share(cfg.n_ff)),
            FfnGateExps | FfnUpExps => Part::Rows(scaled(&experts, n_ff_exp)),
            FfnDownExps => Part::Rows(scaled(&experts, cfg.n_embd)),
            FfnGateExpsBias | FfnUpExpsBias | FfnDownExpsBias => Part::Rows(experts),
            // Norms (per head for q/k), embeddings, the router and its bias, the head; the
            // output projection's bias, which only rank 0 keeps ([`Self::weights`]).
            _ => Part::Whole,
        }
    }

    /// Binds this rank's part of every tensor `cfg` (the whole model's) needs: `load` gets
    /// the part's type, dims and bytes, a slice of the file's map or of `cuts` (made by
    /// [`ColumnCuts::cut`] for this shard).
    pub fn load_weights<'f, W>(
        &self,
        cfg: &Config,
        file: &'f GgufFile,
        cuts: &'f ColumnCuts,
        mut load: impl FnMut(TensorId, GgmlType, &[u64], &'f [u8]) -> Result<W>,
    ) -> Result<ModelWeights<W>> {
        let w = ModelWeights::load(cfg, file, |id, ty, dims, data| {
            let part = self.part(cfg, id);
            let dims = part.dims(dims);
            match part {
                Part::Whole => load(id, ty, &dims, data),
                Part::Rows(r) => {
                    let rb = row_bytes(ty, dims[0] as usize);
                    load(id, ty, &dims, &data[r.start * rb..r.end * rb])
                }
                Part::Cols(_) => {
                    let bytes = cuts.map.get(&id).ok_or_else(|| ModelError::Tensor {
                        name: id.name(),
                        what: "its columns were not cut for this rank".into(),
                    })?;
                    load(id, ty, &dims, bytes)
                }
            }
        })?;
        Ok(self.keep(cfg, w))
    }

    /// The whole-model weights a rank drops, and the experts its stacks hold.
    fn keep<W>(&self, cfg: &Config, mut w: ModelWeights<W>) -> ModelWeights<W> {
        for layer in &mut w.layers {
            // A bias joins the sum once: on rank 0.
            if self.rank != 0 {
                layer.attn.output_bias = None;
            }
            if let Ffn::Moe(m) = &mut layer.ffn {
                m.experts = self.experts(cfg);
            }
        }
        w
    }
}

/// Every rank of a split of `cfg`'s model over `ranks`, in rank order; the error names what
/// does not split (no ranks at all included).
pub fn shards(cfg: &Config, ranks: usize) -> Result<Vec<Shard>> {
    // `max(1)`: no ranks at all is refused by `Shard::new` as rank 0 of 0.
    (0..ranks.max(1))
        .map(|r| Shard::new(cfg, r, ranks))
        .collect()
}

/// `f` of every item, each on a thread of its own, all at once (the ranks of a split, its
/// GPUs' uploads): each result, or the panic that ended its thread, in the items' order.
pub fn on_threads<T: Send, R: Send>(
    items: impl IntoIterator<Item = T>,
    f: impl Fn(T) -> R + Sync,
) -> Vec<std::thread::Result<R>> {
    let f = &f;
    std::thread::scope(|scope| {
        let running: Vec<_> = (items.into_iter())
            .map(|item| scope.spawn(move || f(item)))
            .collect();
        running.into_iter().map(|t| t.join()).collect()
    })
}

/// Each rank's view of a batch whose sequences hold a cache per rank (`caches` lists one
/// sequence's, in rank order): rank `r`'s sequences over its own caches, the same rows. `None`
/// when a sequence's caches are not one a rank.
pub fn by_rank<'s, S: 's, C: 's>(
    seqs: &'s mut [SeqRows<'_, S>],
    ranks: usize,
    caches: impl Fn(&'s mut S) -> &'s mut [C],
) -> Option<Vec<Vec<SeqRows<'s, C>>>> {
    let mut per_rank: Vec<Vec<SeqRows<'s, C>>> = (0..ranks).map(|_| Vec::new()).collect();
    for s in seqs.iter_mut() {
        let rows = s.rows.clone();
        let mine = caches(&mut *s.cache);
        if mine.len() != ranks {
            return None;
        }
        for (seqs, cache) in per_rank.iter_mut().zip(mine) {
            seqs.push(SeqRows {
                cache,
                rows: rows.clone(),
            });
        }
    }
    Some(per_rank)
}

/// The bytes of a row `cols` elements wide.
fn row_bytes(ty: GgmlType, cols: usize) -> usize {
    cols / ty.block_elems() * ty.block_bytes()
}

impl Part {
    /// The part's dims, from the whole tensor's: rows split along the last dimension (a stack
    /// of experts keeps its inner shape), columns along the first.
    pub fn dims(&self, dims: &[u64]) -> Vec<u64> {
        let mut d = dims.to_vec();
        match self {
            Part::Whole => {}
            Part::Cols(c) => d[0] = c.len() as u64,
            Part::Rows(r) => {
                let rows: u64 = dims[1..].iter().product();
                let last = d.len() - 1;
                d[last] = d[last] * r.len() as u64 / rows;
            }
        }
        d
    }
}

/// The column parts of one rank's tensors, copied out of the file (a column range is not
/// contiguous there): the output and down projections, and the 1-D q/k/v biases and sinks.
pub struct ColumnCuts {
    map: HashMap<TensorId, Vec<u8>>,
}

impl ColumnCuts {
    /// Refuses (by the tensor's name) a column range of `shard`'s that would cut a
    /// quantization block, without copying anything.
    pub fn check(cfg: &Config, file: &GgufFile, shard: &Shard) -> Result<()> {
        Self::walk(cfg, file, shard, |_, _| {})
    }

    /// Copies out `shard`'s column parts; a range that would cut a quantization block is
    /// refused by the tensor's name.
    pub fn cut(cfg: &Config, file: &GgufFile, shard: &Shard) -> Result<Self> {
        let mut map = HashMap::new();
        Self::walk(cfg, file, shard, |id, bytes| {
            map.insert(id, bytes());
        })?;
        Ok(Self { map })
    }

    /// Each column part of `shard`'s, checked, with a way to copy it out.
    fn walk(
        cfg: &Config,
        file: &GgufFile,
        shard: &Shard,
        mut each: impl FnMut(TensorId, &dyn Fn() -> Vec<u8>),
    ) -> Result<()> {
        for spec in tensor_specs(cfg) {
            let Part::Cols(c) = shard.part(cfg, spec.id) else {
                continue;
            };
            let info = file.require_tensor(&spec.name)?;
            let (ty, cols) = (info.ty, info.dims[0] as usize);
            let be = ty.block_elems();
            if !c.start.is_multiple_of(be) || !c.end.is_multiple_of(be) || c.end > cols {
                return Err(ModelError::Tensor {
                    name: spec.name,
                    what: format!(
                        "columns {c:?} of {cols} cut its {ty:?} blocks of {be}: \
                         this model does not split over {} ranks",
                        shard.ranks
                    ),
                });
            }
            let data = file.tensor_data(info);
            let (rb, from, to) = (
                row_bytes(ty, cols),
                row_bytes(ty, c.start),
                row_bytes(ty, c.end),
            );
            let bytes = || {
                let rows = data.chunks_exact(rb).flat_map(|row| &row[from..to]);
                rows.copied().collect()
            };
            each(spec.id, &bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    #[test]
    fn qwen3_235b_splits_over_four_ranks_not_eight() {
        let cfg = preset("qwen3-235b-a22b").unwrap().config;
        let s = Shard::new(&cfg, 3, 4).unwrap();
        let c = s.config(&cfg);
        assert_eq!((c.n_head, c.n_head_kv), (16, 1));
        assert_eq!(
            c.moe.as_ref().unwrap().n_expert,
            128,
            "the router still sees every expert"
        );
        assert_eq!(s.experts(&cfg), 96..128);
        let q = TensorId::block(5, TensorRole::AttnQ);
        assert_eq!(s.part(&cfg, q), Part::Rows(48 * 128..64 * 128));
        let o = TensorId::block(5, TensorRole::AttnOutput);
        assert_eq!(s.part(&cfg, o), Part::Cols(48 * 128..64 * 128));
        let up = TensorId::block(0, TensorRole::FfnUpExps);
        assert_eq!(s.part(&cfg, up), Part::Rows(96 * 1536..128 * 1536));
        let down = TensorId::block(0, TensorRole::FfnDownExps);
        assert_eq!(s.part(&cfg, down), Part::Rows(96 * 4096..128 * 4096));
        let router = TensorId::block(0, TensorRole::FfnGateInp);
        assert_eq!(s.part(&cfg, router), Part::Whole);
        let e = Shard::new(&cfg, 0, 8).unwrap_err().to_string();
        assert!(e.contains("4 KV groups do not split over 8 ranks"), "{e}");
    }

    #[test]
    fn a_query_scale_read_off_the_head_count_is_refused() {
        let cfg = preset("gemma3-27b").unwrap().config;
        let e = Shard::new(&cfg, 0, 2).unwrap_err().to_string();
        assert!(e.contains("gemma3-27b"), "{e}");
        assert!(Shard::new(&preset("gemma3-4b").unwrap().config, 0, 2).is_ok());
    }

    #[test]
    fn a_dense_model_splits_its_ffn_width() {
        let cfg = preset("qwen3-8b").unwrap().config;
        let s = Shard::new(&cfg, 1, 2).unwrap();
        assert_eq!(s.config(&cfg).n_ff, cfg.n_ff / 2);
        let down = TensorId::block(0, TensorRole::FfnDown);
        assert_eq!(s.part(&cfg, down), Part::Cols(cfg.n_ff / 2..cfg.n_ff));
        assert_eq!(s.experts(&cfg), 0..0);
    }

    #[test]
    fn part_dims_split_the_last_dimension_for_rows_and_the_first_for_columns() {
        assert_eq!(Part::Rows(64..128).dims(&[256, 256]), vec![256, 64]);
        assert_eq!(
            Part::Rows(512..1024).dims(&[256, 128, 8]),
            vec![256, 128, 4]
        );
        assert_eq!(Part::Cols(0..128).dims(&[256, 256]), vec![128, 256]);
        assert_eq!(Part::Cols(2..4).dims(&[4]), vec![2]);
        assert_eq!(Part::Whole.dims(&[256, 8]), vec![256, 8]);
    }
}
