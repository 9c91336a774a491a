//! One request's sequence inside the scheduler: where its prompt is, how it samples, and how
//! its text is streamed (stop strings held back, UTF-8 completed) to the request's channel.
//! With a grammar, its matcher sits in [`Constrained`]; the scheduler takes it out while the
//! next mask is computed beside a forward pass ([`Sequence::take_masking`]).

use crate::scheduler::{Event, FinishReason, Job, TokenLogprob};
use ferrolm_engine::constraint::{ConstraintError, TokenMask, TokenMatcher};
use ferrolm_engine::{greedy_pick, held_back, GreedyPick, Sampler};
use ferrolm_tokenizer::{StreamDecoder, Tokenizer};
use std::collections::HashMap;
use std::time::Instant;

pub(crate) struct Sequence {
    pub job: Job,
    sampler: Sampler,
    /// Prompt tokens already in the cache.
    fed: usize,
    /// Positions in the cache.
    pub n_past: usize,
    /// Prompt tokens whose cache entries came from a reused prefix ([`crate::prefix`]).
    pub n_cached: usize,
    /// The last sampled token, fed at the next step.
    last: u32,
    n_gen: usize,
    /// Generated tokens and how often each came, for the presence/frequency penalties.
    counts: HashMap<u32, u32>,
    decoder: StreamDecoder<'static>,
    /// Decoded text not yet sent: it may still become a stop string.
    pending: String,
    max_tokens: usize,
    n_ctx: usize,
    /// Ended by a stop string: what follows it is never sent.
    hit_stop: bool,
    /// A committed token whose text is not yet streamed ([`Self::on_pick_deferred`]): it is
    /// streamed beside the next forward pass ([`Self::stream_unsent`]).
    unsent: Option<u32>,
    pub first_token_at: Option<Instant>,
    /// The grammar's state; `None` without a grammar, and while the scheduler holds it.
    constrained: Option<Constrained>,
    /// This step's logits as sampled (penalties applied), kept from step to step so that its
    /// pages stay mapped.
    scratch: Vec<f32>,
}

/// A sequence's matcher and the mask for its next token.
pub(crate) struct Constrained {
    matcher: TokenMatcher,
    /// `None` while due: computed beside the next forward pass.
    mask: Option<Result<TokenMask, ConstraintError>>,
}

impl Constrained {
    /// Computes the next mask unless it is already there.
    pub fn compute_mask(&mut self) {
        if self.mask.is_none() {
            self.mask = Some(self.matcher.compute_mask());
        }
    }
}

impl Sequence {
    /// A sequence whose cache already holds the first `cached` prompt tokens (less than the
    /// prompt's length: its last token is always evaluated).
    pub fn new(job: Job, tok: &'static Tokenizer, n_ctx: usize, cached: usize) -> Self {
        let mut sampler = Sampler::new(job.params.sampler.clone());
        sampler.accept(&job.prompt);
        debug_assert!(cached < job.prompt.len());
        Self {
            sampler,
            fed: cached,
            n_past: cached,
            n_cached: cached,
            last: 0,
            n_gen: 0,
            counts: HashMap::new(),
            decoder: tok.stream_decoder(),
            pending: String::new(),
            max_tokens: job.params.max_tokens.unwrap_or(usize::MAX),
            n_ctx,
            hit_stop: false,
            unsent: None,
            first_token_at: None,
            constrained: job.grammar.as_ref().map(|g| Constrained {
                matcher: g.matcher(),
                mask: None,
            }),
            scratch: Vec::new(),
            job,
        }
    }

    pub fn prefilling(&self) -> bool {
        self.fed < self.job.prompt.len()
    }

    /// This step's tokens: the next prompt chunk (at most `budget` tokens) or the last
    /// sampled token; and whether the step yields logits for it.
    pub fn input(&self, budget: usize) -> (&[u32], bool) {
        if self.prefilling() {
            let end = (self.fed + budget).min(self.job.prompt.len());
            (
                &self.job.prompt[self.fed..end],
                end == self.job.prompt.len(),
            )
        } else {
            (std::slice::from_ref(&self.last), true)
        }
    }

    /// `n` tokens of [`Self::input`] went into the cache.
    pub fn advance(&mut self, n: usize) {
        if self.prefilling() {
            self.fed += n;
        }
        self.n_past += n;
    }

    /// The grammar state when its next mask is due, for the scheduler to compute beside the
    /// forward pass; given back with [`Self::put_masking`].
    pub fn take_masking(&mut self) -> Option<Constrained> {
        if self.constrained.as_ref()?.mask.is_none() {
            self.constrained.take()
        } else {
            None
        }
    }

    pub fn put_masking(&mut self, c: Constrained) {
        self.constrained = Some(c);
    }

    /// Whether this sequence's next token is the greedy choice of its logits as they come
    /// (no penalties, grammar or log-probabilities; `ignore_eos` takes
    /// [`GreedyPick::allowed`]): what a step that brings back picks instead of logits serves.
    pub fn takes_pick(&self) -> bool {
        let p = &self.job.params;
        let penalised = p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        self.constrained.is_none()
            && p.logprobs.is_none()
            && !penalised
            && self.sampler.plain_greedy()
    }

    /// Streams the token this step's greedy pick names ([`Self::takes_pick`] held). `Some`
    /// when the sequence is done.
    pub fn on_pick(&mut self, pick: GreedyPick, tok: &Tokenizer) -> Option<FinishReason> {
        let next = self.take_pick(pick);
        self.after_sample(next, None, tok)
    }

    /// The token `pick` names for this request (`ignore_eos`: the best allowed one), given to
    /// the sampler's history.
    fn take_pick(&mut self, pick: GreedyPick) -> u32 {
        let next = if self.job.params.ignore_eos {
            pick.allowed
        } else {
            pick.best
        };
        self.sampler.accept(&[next]);
        next
    }

    /// [`Self::on_pick`], its text left for [`Self::stream_unsent`] beside the next forward
    /// pass (which feeds the token) unless the sequence ends here: what a server step that
    /// brings back picks does, so that streaming 64 sequences' text is not on the GPU's
    /// path. `Some` when the sequence is done (its text streamed).
    pub fn on_pick_deferred(&mut self, pick: GreedyPick, tok: &Tokenizer) -> Option<FinishReason> {
        let next = self.take_pick(pick);
        if let Some(ended) = self.commit(next, tok) {
            return Some(ended);
        }
        match self.ended() {
            Some(r) => self.stream(next, None).or(Some(r)),
            None => {
                self.unsent = Some(next);
                None
            }
        }
    }

    /// Streams the text of the token [`Self::on_pick_deferred`] committed, if any. `Some`
    /// when it completes a stop string: the sequence is done, and the token fed beside this
    /// streaming is dropped.
    pub fn stream_unsent(&mut self) -> Option<FinishReason> {
        let next = self.unsent.take()?;
        self.stream(next, None)
    }

    /// Whether a committed token's text waits for [`Self::stream_unsent`].
    pub fn has_unsent(&self) -> bool {
        self.unsent.is_some()
    }

    /// Samples from this step's logits and streams the token. `Some` when the sequence is
    /// done (its `Done` event is then sent by the scheduler).
    /// A sequence that takes the greedy pick ([`Self::takes_pick`]) reads the step's logits in
    /// place ([`greedy_pick`]: the token [`Self::sample_copy`] would choose, without copying a
    /// vocabulary's worth of floats a sequence a step).
    pub fn on_logits(&mut self, step_logits: &[f32], tok: &Tokenizer) -> Option<FinishReason> {
        if self.takes_pick() {
            let banned: Vec<u32> = tok.eog_ids().collect();
            return self.on_pick(greedy_pick(step_logits, &banned), tok);
        }
        let (next, logprob) = match self.sample_copy(step_logits, tok) {
            Ok(chosen) => chosen,
            Err(e) => return self.fail(e),
        };
        self.after_sample(next, logprob, tok)
    }

    /// The next token and its log-probabilities from a copy of the step's logits, changed by
    /// the penalties, `ignore_eos` and the grammar's mask.
    fn sample_copy(
        &mut self,
        step_logits: &[f32],
        tok: &Tokenizer,
    ) -> Result<(u32, Option<TokenLogprob>), ConstraintError> {
        let mut logits = std::mem::take(&mut self.scratch);
        logits.clear();
        logits.extend_from_slice(step_logits);
        let p = &self.job.params;
        for (&t, &c) in &self.counts {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= p.presence_penalty + p.frequency_penalty * c as f32;
            }
        }
        if p.ignore_eos {
            // As llama.cpp's server does: the end tokens' logits to -inf, so never sampled.
            for t in tok.eog_ids() {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let mask = match self.constrained.as_mut().map(|c| {
            c.compute_mask();
            c.mask.take().expect("computed")
        }) {
            None => None,
            Some(Ok(mask)) => Some(mask),
            Some(Err(e)) => {
                self.scratch = logits;
                return Err(e);
            }
        };
        // Log-probabilities are the model's, before the sampler's own penalty and the mask:
        // only then does the sampler need a copy to change.
        let (next, logprob) = match p.logprobs {
            Some(k) => {
                let next = self.sampler.sample_masked(&logits, mask.as_ref());
                (next, Some(token_logprob(&logits, next, k, tok)))
            }
            None => (
                self.sampler.sample_in_place(&mut logits, mask.as_ref()),
                None,
            ),
        };
        self.scratch = logits;
        Ok((next, logprob))
    }

    /// The sampled token committed: grammar, counts, text, stop strings and limits.
    fn after_sample(
        &mut self,
        next: u32,
        logprob: Option<TokenLogprob>,
        tok: &Tokenizer,
    ) -> Option<FinishReason> {
        if let Some(ended) = self.commit(next, tok) {
            return Some(ended);
        }
        self.stream(next, logprob).or_else(|| self.ended())
    }

    /// Commits the sampled token `next`: the next step feeds it. `Some` where it ends the
    /// sequence with nothing to stream (an end-of-generation token, a grammar failure).
    fn commit(&mut self, next: u32, tok: &Tokenizer) -> Option<FinishReason> {
        self.first_token_at.get_or_insert_with(Instant::now);
        if tok.is_eog(next) {
            return Some(FinishReason::Stop);
        }
        // Committed now; the next mask is computed during the next forward pass.
        if let Some(c) = self.constrained.as_mut() {
            if let Err(e) = c.matcher.accept(next) {
                return self.fail(e);
            }
        }
        self.n_gen += 1;
        *self.counts.entry(next).or_default() += 1;
        self.last = next;
        None
    }

    /// Whether the committed tokens end the sequence: the grammar is complete, or
    /// `max_tokens` or the context is reached.
    fn ended(&self) -> Option<FinishReason> {
        if self
            .constrained
            .as_ref()
            .is_some_and(|c| c.matcher.is_finished())
        {
            return Some(FinishReason::Stop);
        }
        if self.n_gen >= self.max_tokens || self.n_past >= self.n_ctx {
            return Some(FinishReason::Length);
        }
        None
    }

    /// Streams the committed token `next`'s text, held back while it may still become a
    /// stop string. `Some` when it completes one (what follows is never sent).
    fn stream(&mut self, next: u32, logprob: Option<TokenLogprob>) -> Option<FinishReason> {
        // A token that does not decode (it cannot happen with a vocabulary-built decoder) is
        // dropped from the text rather than failing the request.
        self.pending
            .push_str(&self.decoder.push(next).unwrap_or_default());
        let stop = &self.job.params.stop;
        if let Some(at) = stop
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let text = self.pending[..at].to_owned();
            self.pending.clear();
            self.hit_stop = true;
            self.send(text, logprob);
            return Some(FinishReason::Stop);
        }
        let ready = self.pending.len() - held_back(&self.pending, stop);
        let text: String = self.pending.drain(..ready).collect();
        self.send(text, logprob);
        None
    }

    /// Flushes held-back text (the sequence ended other than by a stop string), a committed
    /// token's first. True where that token completes a stop string (the sequence then ends
    /// by it, whatever ended it).
    pub fn flush(&mut self) -> bool {
        if self.stream_unsent().is_some() {
            return true;
        }
        if self.hit_stop {
            return false;
        }
        let mut text = std::mem::take(&mut self.pending);
        text.push_str(&self.decoder.finish());
        if !text.is_empty() {
            self.send(text, None);
        }
        false
    }

    /// The grammar failed (an llguidance limit or bug, never the client's input): the request
    /// gets a 5xx and the sequence ends.
    fn fail(&mut self, e: ConstraintError) -> Option<FinishReason> {
        let _ = self.job.events.send(Event::Failed(e.to_string()));
        self.hit_stop = true;
        Some(FinishReason::Stop)
    }

    pub fn n_gen(&self) -> usize {
        self.n_gen
    }

    fn send(&self, text: String, logprob: Option<TokenLogprob>) {
        // A closed channel is noticed before the next step, which frees the slot.
        let _ = self.job.events.send(Event::Token { text, logprob });
    }
}

/// `log softmax(logits)[chosen]` and the `k` most likely tokens, from the penalised logits
/// before temperature: the model's distribution, as OpenAI reports it.
fn token_logprob(logits: &[f32], chosen: u32, k: usize, tok: &Tokenizer) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_z = max + logits.iter().map(|l| (l - max).exp()).sum::<f32>().ln();
    let entry = |id: u32| {
        let bytes = tok
            .token_to_piece(id, false)
            .map(|b| b.into_owned())
            .unwrap_or_default();
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            logits[id as usize] - log_z,
        )
    };
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(ids.len());
    if k > 0 {
        ids.select_nth_unstable_by(k - 1, |a, b| {
            logits[*b as usize].total_cmp(&logits[*a as usize])
        });
    }
    ids.truncate(k);
    ids.sort_by(|a, b| logits[*b as usize].total_cmp(&logits[*a as usize]));
    let (token, bytes, logprob) = entry(chosen);
    TokenLogprob {
        token,
        bytes,
        logprob,
        top: ids.into_iter().map(entry).collect(),
    }
}
