//! The L2 prefetch beside a captured one-token step (`ops::l2_ahead`, the plan's
//! `FERROLM_L2_AHEAD`): while layer l's MoE routes and runs its experts, layer l + 1's
//! attention weights and router are asked of L2 by a kernel off the chain. Only a step whose
//! every layer routes through the norm's router launch takes it: the launches' count is what
//! times the requests.

use super::{CudaBackend, CudaWeight};
use crate::error::{CudaError, DriverContext, Result};
use crate::ops::{span_of, L2AheadHow, L2AheadTable};
use cudarc::driver::{CudaSlice, CudaStream};
use ferrolm_model::weights::{Ffn, LayerWeights, ModelWeights};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The kernel's device state, and the count of the step being captured.
pub(super) struct L2AheadState {
    /// Three u32s (`ops::L2Ahead::launch`), zero at first.
    words: Mutex<CudaSlice<u32>>,
    /// Set while a step with the prefetch is captured: its router launches count themselves.
    counting: AtomicBool,
    /// The router launches that counted in that step.
    counted: AtomicUsize,
}

impl L2AheadState {
    pub(super) fn new(words: CudaSlice<u32>) -> Self {
        Self {
            words: Mutex::new(words),
            counting: AtomicBool::new(false),
            counted: AtomicUsize::new(0),
        }
    }
}

/// One group a layer: group l holds layer l + 1's attention weights and router (the last
/// group none), asked for once layer l's router launch has started. `None` unless every
/// layer's FFN is an MoE.
pub(super) fn table_groups(
    w: &ModelWeights<CudaWeight>,
    stream: &CudaStream,
) -> Option<Vec<Vec<(u64, u64)>>> {
    if !w.layers.iter().all(|l| matches!(l.ffn, Ffn::Moe(_))) {
        return None;
    }
    let groups = (0..w.layers.len())
        .map(|l| {
            w.layers
                .get(l + 1)
                .map_or_else(Vec::new, |next| layer_spans(next, stream))
        })
        .collect();
    Some(groups)
}

/// What a layer reads before its experts: the attention's weights, the FFN norm, the router.
fn layer_spans(l: &LayerWeights<CudaWeight>, stream: &CudaStream) -> Vec<(u64, u64)> {
    let a = &l.attn;
    let mut weights = vec![&a.norm, &a.q, &a.k, &a.v, &a.output, &l.ffn_norm];
    weights.extend(a.q_norm.iter().chain(&a.k_norm).chain(&a.output_bias));
    weights.extend(a.qkv_bias.iter().flatten());
    if let Ffn::Moe(m) = &l.ffn {
        weights.push(&m.router);
    }
    weights
        .into_iter()
        .filter_map(|w| match w {
            CudaWeight::Vector(v) => Some(span_of(v, stream)),
            CudaWeight::Router(r) => Some(span_of(&r.w, stream)),
            CudaWeight::Matrix { mat, .. } => Some(span_of(&mat.data, stream)),
            CudaWeight::Absent => None,
        })
        .collect()
}

impl CudaBackend {
    /// Forks the prefetch's stream from the captured stream and queues its kernel there; the
    /// step's router launches count from here to [`Self::l2_ahead_join`].
    pub(super) fn l2_ahead_fork(&self, table: &L2AheadTable, how: L2AheadHow) -> Result<()> {
        let side = self.k.l2_ahead.stream();
        side.join(self.dev.stream())
            .during("forking the L2 prefetch stream")?;
        let mut words = self.l2_words();
        self.k.l2_ahead.launch(table, &mut words, how)?;
        self.l2_ahead.counted.store(0, Ordering::Relaxed);
        self.l2_ahead.counting.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Joins the captured stream to the prefetch's (before the capture ends); an error where
    /// the step's router launches did not count once a group of `table`.
    pub(super) fn l2_ahead_join(&self, table: &L2AheadTable) -> Result<()> {
        self.l2_ahead.counting.store(false, Ordering::Relaxed);
        self.dev
            .stream()
            .join(self.k.l2_ahead.stream())
            .during("joining the L2 prefetch stream")?;
        let counted = self.l2_ahead.counted.load(Ordering::Relaxed);
        if counted != table.groups() {
            return Err(CudaError::Invalid(format!(
                "the L2 prefetch expected {} router launches in the step, {counted} counted",
                table.groups()
            )));
        }
        Ok(())
    }

    /// The count's word for a router launch of the step being captured with the prefetch
    /// (`None` otherwise); counts the launch.
    pub(super) fn l2_progress(&self) -> Option<MutexGuard<'_, CudaSlice<u32>>> {
        if !self.l2_ahead.counting.load(Ordering::Relaxed) {
            return None;
        }
        self.l2_ahead.counted.fetch_add(1, Ordering::Relaxed);
        Some(self.l2_words())
    }

    fn l2_words(&self) -> MutexGuard<'_, CudaSlice<u32>> {
        self.l2_ahead
            .words
            .lock()
            .expect("L2 prefetch state poisoned")
    }
}
