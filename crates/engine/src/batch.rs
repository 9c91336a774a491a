//! Several sequences in one forward pass: continuous batching's engine half.
//!
//! Each sequence brings its own KV cache and a run of new tokens at consecutive positions
//! (a decode step is one token, a prefill chunk many). Their rows are stacked into one batch,
//! so every matmul reads the weights once for all of them; only attention is per sequence.

use crate::model::{Model, PassLogits};
use crate::session::{EngineError, Logits};
use ferrolm_model::backend::SeqRows;
use ferrolm_model::GreedyPick;

/// The KV cache of one sequence, on the model's device.
pub type SeqCache = crate::model::Cache;

/// One sequence's part of a batched forward pass.
pub struct SeqInput<'c> {
    pub cache: &'c mut SeqCache,
    /// New tokens, at positions `pos0..pos0 + tokens.len()` of this sequence.
    pub tokens: &'c [u32],
    /// Positions before this are already in `cache`.
    pub pos0: usize,
    /// Which of this sequence's rows get logits; `None` for none (a prefill chunk that is
    /// not the prompt's last).
    pub logits: Option<Logits>,
}

/// The logits a batched pass returns: one buffer for the whole batch, each sequence's rows a
/// slice of it ([`Self::seq`]). Dropped, the buffer goes back to the model's runner for a
/// later pass to fill, so a serving loop's copies land in memory already mapped.
pub struct BatchLogits<'m> {
    data: PassLogits,
    n_vocab: usize,
    /// Per sequence: its first logit row in `data` and its number of rows.
    spans: Vec<(usize, usize)>,
    model: &'m Model<'m>,
}

impl BatchLogits<'_> {
    /// The number of sequences of the pass.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Sequence `i`'s logits, `[rows][n_vocab]` in token order (empty when it asked for none).
    pub fn seq(&self, i: usize) -> &[f32] {
        let (at, n) = self.spans[i];
        &self.data[at * self.n_vocab..(at + n) * self.n_vocab]
    }

    /// Every sequence's logits copied out, one vector each.
    pub fn to_vecs(&self) -> Vec<Vec<f32>> {
        (0..self.len()).map(|i| self.seq(i).to_vec()).collect()
    }
}

impl Drop for BatchLogits<'_> {
    fn drop(&mut self) {
        self.model.recycle_logits(std::mem::take(&mut self.data));
    }
}

/// The greedy choices of a batched pass ([`Model::forward_batch_greedy`]): each sequence's
/// rows that asked for logits, in token order.
pub struct BatchPicks {
    picks: Vec<GreedyPick>,
    /// Per sequence: its first row in `picks` and its number of rows.
    spans: Vec<(usize, usize)>,
}

impl BatchPicks {
    /// The number of sequences of the pass.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Sequence `i`'s picks (empty when it asked for no logits).
    pub fn seq(&self, i: usize) -> &[GreedyPick] {
        let (at, n) = self.spans[i];
        &self.picks[at..at + n]
    }
}

/// A batch's sequences stacked into one pass's rows.
#[derive(Default)]
struct BatchRows {
    tokens: Vec<u32>,
    positions: Vec<u32>,
    /// The pass's rows that get logits, in sequence and token order.
    logit_rows: Vec<usize>,
    /// Per sequence: its rows of the pass.
    ranges: Vec<std::ops::Range<usize>>,
    /// Per sequence: its first logit row and its number of them.
    spans: Vec<(usize, usize)>,
}

impl BatchRows {
    /// Each sequence's cache with its rows of the pass.
    fn seq_rows<'s>(&self, seqs: &'s mut [SeqInput<'_>]) -> Vec<SeqRows<'s, SeqCache>> {
        seqs.iter_mut()
            .zip(&self.ranges)
            .map(|(s, rows)| SeqRows {
                cache: &mut *s.cache,
                rows: rows.clone(),
            })
            .collect()
    }
}

impl<'a> Model<'a> {
    /// Runs every sequence's new tokens in one forward pass and returns, per sequence, the
    /// logits it asked for (`[rows][n_vocab]`, rows in token order; empty for `None`), each
    /// copied out of the batch's buffer. Serving loops take [`Self::forward_batch_logits`].
    pub fn forward_batch(&self, seqs: &mut [SeqInput<'_>]) -> Result<Vec<Vec<f32>>, EngineError> {
        Ok(self.forward_batch_logits(seqs)?.to_vecs())
    }

    /// Runs every sequence's new tokens in one forward pass; the logits each asked for are
    /// [`BatchLogits::seq`].
    ///
    /// Contract: a sequence's results do not depend on which other sequences share the
    /// batch up to the matmul's f32 summation order (its kernel is chosen by the batch's
    /// total row count); a batch of one sequence is exactly [`crate::Session::eval`]'s pass.
    pub fn forward_batch_logits<'m>(
        &'m self,
        seqs: &mut [SeqInput<'_>],
    ) -> Result<BatchLogits<'m>, EngineError>
    where
        'a: 'm,
    {
        let (data, spans) = self.batch_pass(seqs, |rows, b| {
            self.forward_rows(rows, &b.tokens, &b.positions, &b.logit_rows)
        })?;
        Ok(BatchLogits {
            data,
            n_vocab: self.cfg.n_vocab,
            spans,
            model: self,
        })
    }

    /// [`Self::forward_batch_logits`]'s pass, bringing back the greedy choices of the rows
    /// each sequence asked logits for ([`BatchPicks::seq`]; `banned`: the ids an
    /// `ignore_eos` request rules out, [`GreedyPick::allowed`]) instead of the logits: on a
    /// GPU that picks them there, only a pair of ids a row crosses to the host.
    pub fn forward_batch_greedy(
        &self,
        seqs: &mut [SeqInput<'_>],
        banned: &[u32],
    ) -> Result<BatchPicks, EngineError> {
        let (picks, spans) = self.batch_pass(seqs, |rows, b| {
            self.forward_rows_greedy(rows, &b.tokens, &b.positions, &b.logit_rows, banned)
        })?;
        Ok(BatchPicks { picks, spans })
    }

    /// The batch's sequences stacked ([`Self::batch_rows`]) and run by `pass`, or nothing run
    /// where they bring no tokens; with each sequence's span of logit rows.
    fn batch_pass<T: Default>(
        &self,
        seqs: &mut [SeqInput<'_>],
        pass: impl FnOnce(&mut [SeqRows<'_, SeqCache>], &BatchRows) -> Result<T, EngineError>,
    ) -> Result<(T, Vec<(usize, usize)>), EngineError> {
        let batch = self.batch_rows(seqs)?;
        let out = if batch.tokens.is_empty() {
            T::default()
        } else {
            pass(&mut batch.seq_rows(seqs), &batch)?
        };
        Ok((out, batch.spans))
    }

    /// The batch's rows stacked: every sequence's tokens checked against the vocabulary and
    /// its cache's context.
    fn batch_rows(&self, seqs: &[SeqInput<'_>]) -> Result<BatchRows, EngineError> {
        let n_vocab = self.cfg.n_vocab;
        let mut b = BatchRows::default();
        for s in seqs {
            if let Some(&id) = s.tokens.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(EngineError::TokenOutOfRange { id, n_vocab });
            }
            let need = s.pos0 + s.tokens.len();
            if need > s.cache.n_ctx() {
                return Err(EngineError::ContextFull {
                    need,
                    n_ctx: s.cache.n_ctx(),
                });
            }
            let r0 = b.tokens.len();
            b.tokens.extend_from_slice(s.tokens);
            b.positions.extend((s.pos0..need).map(|p| p as u32));
            let rows = match s.logits {
                _ if s.tokens.is_empty() => 0..0,
                None => 0..0,
                Some(Logits::Last) => s.tokens.len() - 1..s.tokens.len(),
                Some(Logits::All) => 0..s.tokens.len(),
            };
            b.spans.push((b.logit_rows.len(), rows.len()));
            b.logit_rows.extend(rows.map(|r| r0 + r));
            b.ranges.push(r0..b.tokens.len());
        }
        Ok(b)
    }
}
