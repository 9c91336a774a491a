//! Decode steps of several sequences (one token each, logits for all) captured as CUDA graphs,
//! one per padded batch size (the plan's [`Plan::batch_graph_size`]: powers of two) and split
//! count, and replayed for any sequences of that shape.
//!
//! A replay rewrites the graph's inputs: token ids and positions (padding rows: token 0 at
//! position 0) and the rows table, which is where every per-sequence address lives (each
//! layer's K and V, the decode partials), so nothing of a particular cache is baked into the
//! graph. Padding rows run the row-wise ops on their own garbage-free inputs and are skipped
//! by attention (zeros out, nothing stored); their logits are dropped.
//!
//! [`Plan::batch_graph_size`]: crate::plan::Plan::batch_graph_size

use super::rows::served;
use super::runner::ReadLogits;
use super::{CudaAct, CudaCache, CudaInputs, CudaModel};
use crate::error::{DriverContext, Result};
use crate::ops::RowsTable;
use cudarc::driver::{sys, CudaGraph};
use ferrolm_model::backend::{Backend, PassInputs, SeqRows};
use std::collections::{HashMap, HashSet};

/// A graph's key: the padded batch size and the attention grid's splits.
type Key = (usize, usize);

/// The captured multi-sequence steps of one model.
#[derive(Default)]
pub(super) struct BatchGraphs {
    graphs: HashMap<Key, BatchGraph>,
    /// Steps run op by op so far per key: the first fills the buffer pools, the second is
    /// captured.
    eager: HashMap<Key, usize>,
    /// Keys whose capture failed: their steps run op by op from then on.
    failed: HashSet<Key>,
}

struct BatchGraph {
    graph: CudaGraph,
    /// The inputs and rows table the graph reads, rewritten before each replay; held out of
    /// the pools while the graph lives, as is the logits buffer it writes.
    inputs: CudaInputs,
    logits: CudaAct,
}

// SAFETY: as the single-sequence DecodeGraph: a graph is used only under the model's lock on
// its BatchGraphs, one thread at a time; the driver requires no more than that serialization.
unsafe impl Send for BatchGraph {}

impl CudaModel {
    /// A multi-sequence decode step through its graph (replayed, captured, or run padded to
    /// the graph's size on the way there); `None` when this pass is not such a step or the
    /// plan captures none, for the caller to run as it is.
    pub(super) fn batch_step<T>(
        &self,
        seqs: &mut [SeqRows<'_, CudaCache>],
        pass: &PassInputs<'_>,
        logit_rows: &[usize],
        read: &ReadLogits<'_, T>,
    ) -> Result<Option<T>> {
        let n = seqs.len();
        let is_step = pass.rows() == n
            && seqs.iter().enumerate().all(|(i, s)| s.rows == (i..i + 1))
            && logit_rows.iter().copied().eq(0..n);
        let b = &self.backend;
        let size = match b.plan().batch_graph_size(n) {
            Some(size) if is_step && self.dump.is_none() && self.first_layer == 0 => size,
            _ => return Ok(None),
        };
        if !b.batches_attention(seqs, self.cfg.n_head) {
            return Ok(None);
        }
        // The grid as wide as this step's most splits: a graph a (size, splits), so that rows
        // growing past a split's keys get a graph of their own rather than idle blocks here.
        let grid = seqs
            .iter()
            .zip(pass.positions)
            .map(|(s, &p)| b.plan().rows_splits(p as usize + 1, s.cache.work.n_split))
            .max()
            .expect("n >= 2");
        let key = (size, grid);
        let mut state = self.batch_graphs.lock().expect("batch graphs poisoned");
        if state.failed.contains(&key) {
            return Ok(None);
        }
        let (mut tokens, mut positions) = (pass.tokens.to_vec(), pass.positions.to_vec());
        tokens.resize(size, 0);
        positions.resize(size, 0);
        let padded = PassInputs {
            tokens: &tokens,
            positions: &positions,
        };
        let stream = b.device().stream().clone();
        if let Some(g) = state.graphs.get_mut(&key) {
            g.inputs.write(&stream, &padded)?;
            let table = g.inputs.rows_table.as_mut().expect("captured with a table");
            table.write(&stream, &served(b.plan(), seqs, &positions, size))?;
            g.graph.launch().during("replaying a batch graph")?;
            return read(&g.logits, n).map(Some);
        }
        let mut inputs = b.inputs(&padded)?;
        let n_layer = seqs[0].cache.layers.len();
        let mut table = RowsTable::new(b.device(), n_layer, size, grid)?;
        table.write(&stream, &served(b.plan(), seqs, &positions, size))?;
        inputs.rows_table = Some(table);
        let all: Vec<usize> = (0..size).collect();
        let runs = state.eager.entry(key).or_insert(0);
        if *runs == 0 {
            *runs += 1;
            let logits = self.run(seqs, &inputs, &all)?;
            return read(&logits, n).map(Some);
        }
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .during("starting graph capture")?;
        b.set_capturing(true);
        // An op that fails stops the pass here; the capture still ends before anything else.
        let ran = self.run(seqs, &inputs, &all);
        b.set_capturing(false);
        let captured = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        match (captured, ran) {
            (Ok(Some(graph)), Ok(logits)) => {
                graph.launch().during("launching a batch graph")?;
                let g = state.graphs.entry(key).or_insert(BatchGraph {
                    graph,
                    inputs,
                    logits,
                });
                read(&g.logits, n).map(Some)
            }
            // The step is still owed: run it op by op, and capture this shape no more.
            (_, ran) => {
                state.failed.insert(key);
                drop(ran);
                let logits = self.run(seqs, &inputs, &all)?;
                read(&logits, n).map(Some)
            }
        }
    }
}
