//! Continuous batching on a dedicated thread.
//!
//! The scheduler owns `parallel` KV slots. Each step it:
//! 1. admits queued requests into free slots (requests join between steps, never mid-pass);
//! 2. drops sequences whose client is gone (its event channel is closed), freeing the slot;
//! 3. runs ONE forward pass over every active sequence: one token for each decoding sequence,
//!    plus prompt chunks of the prefilling ones, at most `ubatch` prompt tokens in all, so a
//!    long prompt delays the others by at most one ubatch per step;
//! 4. samples each sequence that got logits and streams its text; finished ones free their slot.
//!
//! Sequences with a grammar commit each sampled token at once; the masks for their next tokens
//! are computed on a helper thread while step 3's forward pass runs.
//!
//! Handlers reach it only through [`Handle::submit`]: a queue that admits a request whenever
//! a slot is free or fewer than `--queue` wait (else the caller answers 429), decided under
//! one lock with the engine's count of free slots; queued requests whose client has gone are
//! dropped before the bound is checked. Per request, an unbounded channel of [`Event`]s back.

use crate::api::GenParams;
use crate::metrics::Metrics;
use crate::sequence::Sequence;
use crate::{Engine, ServeOptions};
use ferrolm_engine::constraint::{overlap, Grammar};
use ferrolm_engine::{EngineError, Logits, SeqCache, SeqInput};
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
    seq: Option<Sequence>,
}

pub struct Scheduler {
    engine: Engine,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    ubatch: usize,
    n_ctx: usize,
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
        let slots = (0..parallel)
            .map(|_| {
                Ok(Slot {
                    cache: engine.model.new_cache(opts.n_ctx, opts.kv_type)?,
                    seq: None,
                })
            })
            .collect::<Result<_, EngineError>>()?;
        let handle = Handle {
            shared: shared.clone(),
            _alive: Arc::new(Alive(shared.clone())),
            metrics: metrics.clone(),
        };
        let sched = Self {
            engine,
            shared,
            slots,
            ubatch: opts.ubatch.max(1),
            n_ctx: opts.n_ctx,
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
        while let Some(free) = self.slots.iter().position(|s| s.seq.is_none()) {
            let job = {
                let mut q = self.shared.lock();
                if self.active() == 0 {
                    while q.jobs.is_empty() && !q.closed {
                        q = self.shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
                    }
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
            self.slots[free].seq = Some(Sequence::new(job, self.engine.tok, self.n_ctx));
        }
        self.publish_active();
        true
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

    /// One forward pass over every active sequence, then sampling.
    fn step(&mut self) {
        // (slot, tokens fed, wants logits), in slot order. Decoding sequences are planned
        // first: a token each, never held back by a prefill.
        let mut plan = Vec::new();
        let mut budget = self.ubatch;
        for prefill in [false, true] {
            for (i, slot) in self.slots.iter().enumerate() {
                let Some(seq) = &slot.seq else { continue };
                if seq.prefilling() != prefill || (prefill && budget == 0) {
                    continue;
                }
                let (tokens, logits) = seq.input(budget);
                if prefill {
                    budget -= tokens.len();
                }
                plan.push((i, tokens.len(), logits));
            }
        }
        if plan.is_empty() {
            return;
        }
        plan.sort_by_key(|p| p.0);
        // Grammar state whose next mask is due, taken out of its sequence for the helper.
        let mut masking: Vec<_> = plan
            .iter()
            .filter_map(|&(i, _, _)| {
                let seq = self.slots[i].seq.as_mut()?;
                seq.take_masking().map(|m| (i, m))
            })
            .collect();
        let result = {
            let mut inputs = Vec::with_capacity(plan.len());
            let mut next = plan.iter().peekable();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                let Some(&(_, n, logits)) = next.next_if(|p| p.0 == i) else {
                    continue;
                };
                let seq = slot.seq.as_ref().expect("planned slots are active");
                inputs.push(SeqInput {
                    cache: &mut slot.cache,
                    tokens: seq.input(n).0,
                    pos0: seq.n_past,
                    logits: logits.then_some(Logits::Last),
                });
            }
            // A panic in a kernel fails this batch's requests, not the whole server.
            let model = self.engine.model;
            let mut forward = || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    model.forward_batch(&mut inputs).map_err(|e| e.to_string())
                }))
                .unwrap_or_else(|_| Err("the forward pass panicked (see the server's log)".into()))
            };
            let (result, masked) = if masking.is_empty() {
                (forward(), masking)
            } else {
                overlap(forward, || {
                    for (_, m) in &mut masking {
                        m.compute_mask();
                    }
                    masking
                })
            };
            for (i, m) in masked {
                if let Some(seq) = self.slots[i].seq.as_mut() {
                    seq.put_masking(m);
                }
            }
            result
        };
        self.metrics.steps.fetch_add(1, Ordering::Relaxed);
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                // Prompts are checked to fit before they are queued, so this is a bug: fail
                // the batch's requests rather than the server.
                for &(i, _, _) in &plan {
                    if let Some(seq) = self.slots[i].seq.take() {
                        let _ = seq.job.events.send(Event::Failed(e.clone()));
                    }
                }
                self.publish_active();
                return;
            }
        };
        for (&(i, n, _), l) in plan.iter().zip(logits) {
            let seq = self.slots[i]
                .seq
                .as_mut()
                .expect("planned slots are active");
            seq.advance(n);
            if l.is_empty() {
                continue;
            }
            if let Some(reason) = seq.on_logits(&l, self.engine.tok) {
                self.finish(i, reason);
            }
        }
        self.publish_active();
    }

    fn finish(&mut self, slot: usize, reason: FinishReason) {
        let Some(mut seq) = self.slots[slot].seq.take() else {
            return;
        };
        seq.flush();
        let (n_prompt, n_gen) = (seq.job.prompt.len(), seq.n_gen());
        let m = &self.metrics;
        m.prompt_tokens.fetch_add(n_prompt, Ordering::Relaxed);
        m.generated_tokens.fetch_add(n_gen, Ordering::Relaxed);
        if let Some(t) = seq.first_token_at {
            m.first_token_seconds
                .observe((t - seq.job.enqueued).as_secs_f64());
        }
        let _ = seq.job.events.send(Event::Done {
            reason,
            n_prompt,
            n_gen,
        });
    }
}
