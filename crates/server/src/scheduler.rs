//! Continuous batching on a dedicated thread.
//!
//! The scheduler owns `parallel` KV slots. Each step it:
//! 1. admits queued requests into free slots (requests join between steps, never mid-pass),
//!    each starting from the longest prefix of its prompt some slot's cache already holds
//!    ([`crate::prefix`]);
//! 2. drops sequences whose client is gone (its event channel is closed), freeing the slot;
//! 3. runs ONE forward pass over every active sequence under a token budget (`--batch-size`):
//!    one token for each decoding sequence (never held back), then chunks of the prefilling
//!    ones' prompts, oldest request first, in what is left (at least an eighth of the budget,
//!    so prompts never starve). A long prompt is prefilled over several steps, and the
//!    sequences already generating get a token at each of them;
//! 4. samples each sequence that got logits and streams its text; finished ones free their slot.
//!
//! Deterministic mode on a GPU (`--deterministic`) runs each sequence in a pass of its own,
//! its prompt cut into chunks as it would be alone and no prefix reused: the GPU's batched
//! kernels are not row-independent. On the CPU the passes are (batch-invariant mode), so the
//! batch stays shared there.
//!
//! Sequences with a grammar commit each sampled token at once; the masks for their next tokens
//! are computed on a helper thread while step 3's forward pass runs. The same helper streams
//! the text of the tokens the last step took from its greedy picks (the next pass feeds them
//! meanwhile); a stop string found there ends its sequence before the pass's results.
//!
//! Handlers reach it only through [`Handle::submit`]: a queue that admits a request whenever
//! a slot is free or fewer than `--queue` wait (else the caller answers 429), decided under
//! one lock with the engine's count of free slots; queued requests whose client has gone are
//! dropped before the bound is checked. Per request, an unbounded channel of [`Event`]s back.

use crate::api::GenParams;
use crate::kv_budget::KvBudget;
use crate::metrics::Metrics;
use crate::prefix::{self, SlotView};
use crate::sequence::Sequence;
use crate::{Engine, ServeOptions};
use ferrolm_engine::constraint::{overlap, Grammar};
use ferrolm_engine::{
    BatchLogits, BatchPicks, EngineError, GreedyPick, Logits, SeqCache, SeqInput,
};
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, or the end of the slot's context.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

#[derive(Clone, Debug)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// The most likely tokens at this position: text, bytes, log-probability.
    pub top: Vec<(String, Vec<u8>, f32)>,
}

#[derive(Debug)]
pub enum Event {
    /// One generated token: the text it completes (empty while UTF-8 or a possible stop
    /// string is pending) and, when asked for, its log-probabilities.
    Token {
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done {
        reason: FinishReason,
        n_prompt: usize,
        /// Prompt tokens reused from a cache, not computed (`usage.prompt_tokens_details`).
        n_cached: usize,
        n_gen: usize,
    },
    /// The engine failed on this request (a 5xx: never the client's fault).
    Failed(String),
}

/// A request for the engine: prompt tokens, already checked to fit a slot's context.
pub struct Job {
    pub prompt: Vec<u32>,
    /// The compiled `response_format` / `grammar`, if any.
    pub grammar: Option<Grammar>,
    pub params: GenParams,
    pub events: UnboundedSender<Event>,
    pub enqueued: Instant,
}

#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    QueueFull,
    /// The engine thread has stopped.
    Closed,
}

/// The waiting room between the handlers and the engine. Admission is decided here, under
/// one lock with the engine's count of free slots, so a request is accepted whenever a slot is
/// free or a queue place is (no race with the engine taking jobs or releasing slots).
struct Queue {
    jobs: VecDeque<Job>,
    /// Slots with no sequence and no job on its way to them.
    free: usize,
    /// Every [`Handle`] is gone: the engine finishes what it has and stops.
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job arrives or the queue closes.
    ready: Condvar,
    /// Jobs that may wait beyond the free slots (`--queue`).
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves the queue consistent (every change is one
        // push, pop, retain or assignment): keep serving.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Closes the queue when the last [`Handle`] is dropped.
struct Alive(Arc<Shared>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.ready.notify_all();
    }
}

/// The handlers' side: cheap to clone.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
    _alive: Arc<Alive>,
    metrics: Arc<Metrics>,
}

impl Handle {
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        let mut q = self.shared.lock();
        if q.closed {
            return Err(SubmitError::Closed);
        }
        // Jobs whose client has gone hold no place in the queue.
        let before = q.jobs.len();
        q.jobs.retain(|j| !j.events.is_closed());
        let dropped = before - q.jobs.len();
        if dropped > 0 {
            self.metrics
                .queue_depth
                .fetch_sub(dropped, Ordering::Relaxed);
            self.metrics.cancelled.fetch_add(dropped, Ordering::Relaxed);
        }
        if q.jobs.len() >= q.free + self.shared.capacity {
            return Err(SubmitError::QueueFull);
        }
        q.jobs.push_back(job);
        self.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
        drop(q);
        self.shared.ready.notify_one();
        Ok(())
    }
}

struct Slot {
    cache: SeqCache,
    /// The tokens at positions `0..len` of `cache`: what a later prompt may reuse.
    tokens: Vec<u32>,
    seq: Option<Sequence>,
    /// The admission count when a sequence last took this slot.
    last_used: u64,
    /// KV blocks promised to its sequence ([`KvBudget::promise`]), while it has one.
    promised: usize,
}

pub struct Scheduler {
    engine: Engine,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    /// Tokens per step (`--batch-size`).
    batch: usize,
    n_ctx: usize,
    /// The GPU's KV pool, where caches are paged.
    kv: Option<KvBudget>,
    /// Reuse cached prompt prefixes (off: `--no-prefix-cache`, or deterministic on a GPU).
    prefix_cache: bool,
    /// A pass per sequence, prompt chunks as alone (deterministic mode on a GPU).
    solo: bool,
    /// A step that brings back picks streams their text beside the next step's forward pass
    /// (off: `--no-stream-overlap`, streamed before the next step as with logits).
    stream_overlap: bool,
    admitted: u64,
    metrics: Arc<Metrics>,
}

impl Scheduler {
    /// Fails when the slots' KV caches cannot be made (a GPU without room for them).
    pub fn new(
        engine: Engine,
        opts: &ServeOptions,
        metrics: Arc<Metrics>,
    ) -> Result<(Handle, Self), EngineError> {
        let parallel = opts.parallel.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                free: parallel,
                closed: false,
            }),
            ready: Condvar::new(),
            capacity: opts.queue,
        });
        // Before the slots' caches: on a GPU they take their blocks from this pool.
        let kv = KvBudget::reserve(
            engine.model,
            parallel,
            opts.n_ctx,
            opts.kv_type,
            opts.kv_blocks,
        )?;
        if let Some(kv) = &kv {
            eprintln!(
                "ferrolm serve: KV pool of {} blocks of {} positions ({} contexts of {})",
                kv.n_blocks,
                kv.block,
                (kv.n_blocks * kv.block) as f64 / opts.n_ctx.max(1) as f64,
                opts.n_ctx
            );
            metrics
                .kv_blocks_total
                .store(kv.n_blocks, Ordering::Relaxed);
        }
        let slots = (0..parallel)
            .map(|_| {
                Ok(Slot {
                    cache: engine.model.new_cache(opts.n_ctx, opts.kv_type)?,
                    tokens: Vec::new(),
                    seq: None,
                    last_used: 0,
                    promised: 0,
                })
            })
            .collect::<Result<_, EngineError>>()?;
        let handle = Handle {
            shared: shared.clone(),
            _alive: Arc::new(Alive(shared.clone())),
            metrics: metrics.clone(),
        };
        let solo = opts.deterministic && !engine.model.is_cpu_only();
        let sched = Self {
            engine,
            shared,
            slots,
            batch: opts.batch.max(1),
            n_ctx: opts.n_ctx,
            kv,
            prefix_cache: opts.prefix_cache && !solo,
            solo,
            stream_overlap: opts.stream_overlap,
            admitted: 0,
            metrics,
        };
        Ok((handle, sched))
    }

    /// Runs until every [`Handle`] is dropped and the last sequence has finished.
    pub fn run(mut self) {
        while self.admit() {
            self.drop_cancelled();
            self.step();
        }
    }

    fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.seq.is_some()).count()
    }

    /// Fills free slots from the queue, blocking only when nothing is running. False when
    /// the queue is closed and nothing is left to do.
    fn admit(&mut self) -> bool {
        while self.slots.iter().any(|s| s.seq.is_none()) {
            let job = {
                let mut q = self.shared.lock();
                if self.active() == 0 {
                    while q.jobs.is_empty() && !q.closed {
                        q = self.shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
                    }
                }
                // A request whose KV blocks do not fit yet waits, first in line, for running
                // ones to finish (one always fits when nothing runs: a promise is at most a
                // context, and the pool holds one).
                if q.jobs.front().is_some_and(|j| !self.kv_admits(j)) {
                    break;
                }
                let Some(job) = q.jobs.pop_front() else {
                    if q.closed && self.active() == 0 {
                        return false;
                    }
                    break;
                };
                // The job takes a free slot: the admission bound stays the same.
                q.free = q.free.saturating_sub(1);
                job
            };
            self.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
            if job.events.is_closed() {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                self.shared.lock().free += 1;
                continue;
            }
            self.metrics
                .queue_seconds
                .observe(job.enqueued.elapsed().as_secs_f64());
            self.start(job);
        }
        self.publish_active();
        true
    }

    /// Puts `job` in a free slot, from the longest cached prefix of its prompt.
    fn start(&mut self, job: Job) {
        let views: Vec<SlotView> = self
            .slots
            .iter()
            .map(|s| SlotView {
                tokens: &s.tokens,
                free: s.seq.is_none(),
                last_used: s.last_used,
            })
            .collect();
        let place = prefix::place(&views, &job.prompt, self.prefix_cache)
            .expect("admit takes a job only while a slot is free");
        let mut reused = place.reused;
        if let Some(from) = place.copy_from {
            if let Err(e) = self.copy_prefix(from, place.slot, reused) {
                // The target's cache may be half written: it holds nothing reusable.
                eprintln!("ferrolm serve: copying a cached prefix failed ({e}); computing it");
                self.slots[place.slot].tokens.clear();
                reused = 0;
            }
        }
        self.admitted += 1;
        let promised = self.kv_promise(&job);
        let slot = &mut self.slots[place.slot];
        slot.tokens.truncate(reused);
        // Blocks past the reused prefix go back to the pool.
        slot.cache.truncate(reused);
        slot.promised = promised;
        slot.last_used = self.admitted;
        self.metrics
            .prompt_tokens_cached
            .fetch_add(reused, Ordering::Relaxed);
        slot.seq = Some(Sequence::new(job, self.engine.tok, self.n_ctx, reused));
        self.make_kv_room();
    }

    fn kv_promise(&self, job: &Job) -> usize {
        self.kv
            .map_or(0, |kv| kv.promise(job.prompt.len(), job.params.max_tokens))
    }

    /// Whether `job`'s blocks fit beside what the running sequences were promised.
    fn kv_admits(&self, job: &Job) -> bool {
        let Some(kv) = self.kv else { return true };
        let promised = self
            .slots
            .iter()
            .filter(|s| s.seq.is_some())
            .map(|s| s.promised)
            .sum();
        kv.admits(promised, self.kv_promise(job))
    }

    /// Frees idle slots' cached blocks, least recently used first, until the pool has every
    /// block the running sequences may still take: no pass then finds it empty.
    fn make_kv_room(&mut self) {
        if self.kv.is_none() {
            return;
        }
        let held = |s: &Slot| s.cache.kv_blocks().map_or(0, |b| b.0);
        loop {
            let owed: usize = self
                .slots
                .iter()
                .filter(|s| s.seq.is_some())
                .map(|s| s.promised.saturating_sub(held(s)))
                .sum();
            let free = self
                .engine
                .model
                .kv_free_blocks()
                .map_or(usize::MAX, |f| f.0);
            self.metrics.kv_blocks_free.store(free, Ordering::Relaxed);
            if free >= owed {
                return;
            }
            let idle = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.seq.is_none() && held(s) > 0)
                .min_by_key(|(_, s)| s.last_used)
                .map(|(i, _)| i);
            let Some(i) = idle else { return };
            let slot = &mut self.slots[i];
            slot.cache.truncate(0);
            slot.tokens.clear();
        }
    }

    /// Copies the first `n` positions of slot `from`'s cache into slot `to`'s.
    fn copy_prefix(&mut self, from: usize, to: usize, n: usize) -> Result<(), EngineError> {
        let (src, dst) = if from < to {
            let (a, b) = self.slots.split_at_mut(to);
            (&a[from], &mut b[0])
        } else {
            let (a, b) = self.slots.split_at_mut(from);
            (&b[0], &mut a[to])
        };
        self.engine
            .model
            .copy_cache_prefix(&src.cache, &mut dst.cache, n)?;
        dst.tokens.clear();
        dst.tokens.extend_from_slice(&src.tokens[..n]);
        Ok(())
    }

    /// Publishes the active count, and the free slots to the queue's admission bound.
    fn publish_active(&self) {
        let active = self.active();
        self.metrics.slots_active.store(active, Ordering::Relaxed);
        self.shared.lock().free = self.slots.len() - active;
    }

    fn drop_cancelled(&mut self) {
        for slot in &mut self.slots {
            if slot.seq.as_ref().is_some_and(|s| s.job.events.is_closed()) {
                slot.seq = None;
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.publish_active();
    }

    /// This step's work: (slot, tokens fed, wants logits), in slot order. Decoding sequences
    /// get a token each, never held back by a prefill; prompt chunks share what is left of
    /// the budget, oldest request first.
    fn plan(&self) -> Vec<(usize, usize, bool)> {
        let mut plan = Vec::new();
        let mut prefilling = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(seq) = &slot.seq else { continue };
            if seq.prefilling() {
                prefilling.push((seq.job.enqueued, i));
            } else {
                plan.push((i, 1, true));
            }
        }
        prefilling.sort();
        let mut budget = self
            .batch
            .saturating_sub(plan.len())
            .max(self.batch.div_ceil(8));
        for (_, i) in prefilling {
            // Alone (solo), a prompt's chunks do not depend on what else is running.
            let room = if self.solo { self.batch } else { budget };
            if room == 0 {
                break;
            }
            let seq = self.slots[i].seq.as_ref().expect("listed as active");
            let (tokens, logits) = seq.input(room);
            budget = budget.saturating_sub(tokens.len());
            plan.push((i, tokens.len(), logits));
        }
        plan.sort_by_key(|p| p.0);
        plan
    }

    /// One forward pass over every active sequence (a pass each when solo), then sampling.
    /// Beside the pass, on a helper thread: the grammar masks due, and the text of the tokens
    /// the last step committed from its picks ([`Sequence::on_pick_deferred`]); a sequence
    /// that text ends (a stop string) is finished before this pass's results, its row dropped.
    fn step(&mut self) {
        let started = Instant::now();
        let plan = self.plan();
        // Every active sequence is planned (a decoding one always, a prefilling one at least
        // the budget's eighth), so none has text owed when nothing is.
        if plan.is_empty() {
            debug_assert!(self
                .slots
                .iter()
                .all(|s| !s.seq.as_ref().is_some_and(Sequence::has_unsent)));
            return;
        }
        let rows: usize = plan.iter().map(|p| p.1).sum();
        let decode_only = plan.iter().all(|&(i, _, _)| {
            let seq = self.slots[i].seq.as_ref();
            !seq.is_some_and(Sequence::prefilling)
        });
        // Where every sequence that samples this step takes the greedy choice of its logits,
        // the pass brings back the choices alone (on a GPU that picks them there, a pair of
        // ids a sequence instead of a vocabulary of floats). Asked before a grammar is taken
        // out for its mask below: a sequence with one never takes a pick.
        let picks = plan.iter().filter(|p| p.2).all(|&(i, _, _)| {
            let seq = self.slots[i].seq.as_ref();
            seq.is_some_and(Sequence::takes_pick)
        });
        let banned: Vec<u32> = self.engine.tok.eog_ids().collect();
        // Grammar state whose next mask is due, taken out of its sequence for the helper.
        let mut masking: Vec<_> = plan
            .iter()
            .filter_map(|&(i, _, _)| {
                let seq = self.slots[i].seq.as_mut()?;
                seq.take_masking().map(|m| (i, m))
            })
            .collect();
        // Each planned sequence's tokens and first position, copied: the sequences stream
        // their owed text while the pass feeds these.
        let fed: Vec<(Vec<u32>, usize)> = plan
            .iter()
            .map(|&(i, n, _)| {
                let seq = self.slots[i]
                    .seq
                    .as_ref()
                    .expect("planned slots are active");
                (seq.input(n).0.to_vec(), seq.n_past)
            })
            .collect();
        let (result, masked, stopped) = {
            let mut inputs = Vec::with_capacity(plan.len());
            let mut streaming: Vec<(usize, &mut Sequence)> = Vec::new();
            let mut next = plan.iter().zip(&fed).peekable();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                let Slot { cache, seq, .. } = slot;
                if let Some(seq) = seq.as_mut().filter(|s| s.has_unsent()) {
                    streaming.push((i, seq));
                }
                let Some((&(_, _, logits), (tokens, pos0))) = next.next_if(|p| p.0 .0 == i) else {
                    continue;
                };
                inputs.push(SeqInput {
                    cache,
                    tokens,
                    pos0: *pos0,
                    logits: logits.then_some(Logits::Last),
                });
            }
            // A panic in a kernel fails this batch's requests, not the whole server.
            let (model, solo) = (self.engine.model, self.solo);
            let mut forward = || {
                let pass = |seqs: &mut [SeqInput<'_>]| {
                    let out = match picks {
                        true => model
                            .forward_batch_greedy(seqs, &banned)
                            .map(StepBatch::Picks),
                        false => model.forward_batch_logits(seqs).map(StepBatch::Logits),
                    };
                    out.map_err(|e| e.to_string())
                };
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if !solo {
                        return pass(&mut inputs).map(|b| vec![b]);
                    }
                    inputs.chunks_mut(1).map(pass).collect()
                }))
                .unwrap_or_else(|_| Err("the forward pass panicked (see the server's log)".into()))
            };
            let forward_started = Instant::now();
            let (result, (masked, stopped)) = if masking.is_empty() && streaming.is_empty() {
                (forward(), (masking, Vec::new()))
            } else {
                overlap(forward, || {
                    for (_, m) in &mut masking {
                        m.compute_mask();
                    }
                    let stopped: Vec<usize> = streaming
                        .into_iter()
                        .filter_map(|(i, seq)| seq.stream_unsent().map(|_| i))
                        .collect();
                    (masking, stopped)
                })
            };
            let m = &self.metrics;
            let forward_seconds = match decode_only {
                true => &m.forward_decode_seconds,
                false => &m.forward_mixed_seconds,
            };
            forward_seconds.observe(forward_started.elapsed().as_secs_f64());
            (result, masked, stopped)
        };
        for (i, m) in masked {
            if let Some(seq) = self.slots[i].seq.as_mut() {
                seq.put_masking(m);
            }
        }
        // Ended by a stop string in their owed text: done before this pass's results, which
        // drop their rows.
        for i in stopped {
            self.finish(i, FinishReason::Stop);
        }
        self.metrics.steps.fetch_add(1, Ordering::Relaxed);
        self.metrics.step_rows.fetch_add(rows, Ordering::Relaxed);
        let batches = match result {
            Ok(b) => b,
            Err(e) => {
                // Prompts are checked to fit before they are queued, so this is a bug: fail
                // the batch's requests rather than the server.
                for &(i, _, _) in &plan {
                    let slot = &mut self.slots[i];
                    // What the pass wrote is unknown: nothing in the cache is reused.
                    slot.tokens.clear();
                    if let Some(seq) = slot.seq.take() {
                        let _ = seq.job.events.send(Event::Failed(e.clone()));
                    }
                }
                self.publish_active();
                return;
            }
        };
        // One batch, or a batch per sequence (solo): the planned sequences' logits in order.
        let logits = batches.iter().flat_map(|b| (0..b.len()).map(|i| b.seq(i)));
        let mut step_logits: Vec<Option<Sampled>> = vec![None; self.slots.len()];
        for ((&(i, n, _), l), (tokens, _)) in plan.iter().zip(logits).zip(&fed) {
            let slot = &mut self.slots[i];
            // The cache holds the fed tokens whether or not their sequence is still there.
            slot.tokens.extend_from_slice(tokens);
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            if seq.prefilling() {
                self.metrics
                    .prompt_tokens_computed
                    .fetch_add(n, Ordering::Relaxed);
            }
            seq.advance(n);
            step_logits[i] = l;
        }
        // Each sequence samples from its own logits: on all cores, since at many sequences
        // a step's sampling on one thread would take as long as a GPU's forward pass. Picks
        // leave their text for the next step's helper (`--no-stream-overlap`: streamed here).
        let (tok, defer) = (self.engine.tok, self.stream_overlap);
        let sampling_started = Instant::now();
        let finished: Vec<(usize, FinishReason)> = self
            .slots
            .par_iter_mut()
            .zip(step_logits.par_iter())
            .enumerate()
            .filter_map(|(i, (slot, l))| {
                let seq = slot.seq.as_mut()?;
                let done = match (*l)? {
                    Sampled::Logits(l) => seq.on_logits(l, tok),
                    Sampled::Pick(p) if defer => seq.on_pick_deferred(p, tok),
                    Sampled::Pick(p) => seq.on_pick(p, tok),
                };
                done.map(|r| (i, r))
            })
            .collect();
        self.metrics
            .sample_seconds
            .observe(sampling_started.elapsed().as_secs_f64());
        // The logits buffer goes back to the model for the next step before the finished
        // sequences' last events.
        drop(step_logits);
        drop(batches);
        for (i, reason) in finished {
            self.finish(i, reason);
        }
        self.publish_active();
        self.metrics
            .step_seconds
            .observe(started.elapsed().as_secs_f64());
    }

    fn finish(&mut self, slot: usize, reason: FinishReason) {
        let Some(mut seq) = self.slots[slot].seq.take() else {
            return;
        };
        let reason = if seq.flush() {
            FinishReason::Stop
        } else {
            reason
        };
        let (n_prompt, n_gen) = (seq.job.prompt.len(), seq.n_gen());
        let m = &self.metrics;
        m.prompt_tokens.fetch_add(n_prompt, Ordering::Relaxed);
        m.generated_tokens.fetch_add(n_gen, Ordering::Relaxed);
        if let Some(t) = seq.first_token_at {
            m.first_token_seconds
                .observe((t - seq.job.enqueued).as_secs_f64());
        }
        // The slot is free before the client hears of it: a request sent the moment this one
        // is answered must find it free (with `--queue 0`, else it would get a 429).
        self.publish_active();
        let _ = seq.job.events.send(Event::Done {
            reason,
            n_prompt,
            n_cached: seq.n_cached,
            n_gen,
        });
    }
}

/// One pass's results: logits, or the greedy picks where every sequence that samples takes
/// the greedy choice ([`Sequence::takes_pick`]).
enum StepBatch<'m> {
    Logits(BatchLogits<'m>),
    Picks(BatchPicks),
}

/// What a sequence samples from this step.
#[derive(Clone, Copy)]
enum Sampled<'a> {
    Logits(&'a [f32]),
    Pick(GreedyPick),
}

impl StepBatch<'_> {
    fn len(&self) -> usize {
        match self {
            Self::Logits(b) => b.len(),
            Self::Picks(b) => b.len(),
        }
    }

    /// Sequence `i`'s last logit row or pick; `None` when it asked for none (a prompt chunk
    /// before the last).
    fn seq(&self, i: usize) -> Option<Sampled<'_>> {
        match self {
            Self::Logits(b) => Some(b.seq(i))
                .filter(|l| !l.is_empty())
                .map(Sampled::Logits),
            Self::Picks(b) => b.seq(i).last().copied().map(Sampled::Pick),
        }
    }
}
