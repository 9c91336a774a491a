//! What the engine asks of a model loaded on one backend ([`ModelRunner`]): the CPU's
//! `CpuModel` and the GPU's `CudaModel` have the same shape (load, a cache per sequence,
//! forward passes over [`SeqRows`] and [`PassInputs`]), each in its own backend crate.

use crate::backend::{PassInputs, SeqRows};
use crate::config::Config;

pub trait ModelRunner {
    /// The KV cache of one sequence.
    type Cache;
    type Error: std::fmt::Display;
    /// A pass's logits on the host (a vector, or memory the runner keeps, such as the GPU's
    /// page-locked buffer).
    type Logits: std::ops::Deref<Target = [f32]>;

    fn config(&self) -> &Config;

    /// Logits `[logit_rows.len()][n_vocab]` for a batch of sequences (`seqs`, each its cache
    /// and its rows of the pass).
    fn forward_rows(
        &self,
        seqs: &mut [SeqRows<'_, Self::Cache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
    ) -> Result<Self::Logits, Self::Error>;

    /// The greedy choice of each logit row ([`GreedyPick`], `banned` the ids a request may
    /// rule out), where the runner takes it where the logits are, without bringing them to
    /// the host; `Ok(None)`, before running anything, where it does not (the caller then runs
    /// [`Self::forward_rows`] and picks from its logits).
    fn forward_rows_greedy(
        &self,
        _seqs: &mut [SeqRows<'_, Self::Cache>],
        _pass: &PassInputs<'_>,
        _logit_rows: &[usize],
        _banned: &[u32],
    ) -> Result<Option<Vec<GreedyPick>>, Self::Error> {
        Ok(None)
    }

    /// Logits from [`Self::forward_rows`] the caller has finished with: a runner may keep the
    /// buffer for a later pass (the GPU's copy into it then finds its memory page-locked or
    /// its pages mapped).
    fn recycle_logits(&self, _logits: Self::Logits) {}
}

/// A logit row's greedy choices: the first index of its largest value (NaNs passed over; 0
/// where the row starts with NaN), over the row as it is (`best`) and with a request's banned
/// ids taken as -inf (`allowed`: an `ignore_eos` request's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GreedyPick {
    pub best: u32,
    pub allowed: u32,
}
