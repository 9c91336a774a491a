//! One sequence's grammar state: which tokens may come next, and committing the one sampled.

use super::vocab::ConstraintVocab;
use super::ConstraintError;
use llguidance::{Matcher, TokenParser};
use toktrie::SimpleVob;

/// A schema or grammar compiled against a model's vocabulary. Make one [`TokenMatcher`] per
/// sequence from it.
#[derive(Clone)]
pub struct Grammar {
    pub(super) parser: TokenParser,
    pub(super) vocab: ConstraintVocab,
}

impl Grammar {
    /// A fresh matcher at the start of the output.
    pub fn matcher(&self) -> TokenMatcher {
        TokenMatcher {
            inner: Matcher::new(Ok(self.parser.clone())),
            vocab: self.vocab.clone(),
        }
    }
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammar")
    }
}

/// The tokens allowed at one position, for logits of the model's width.
#[derive(Clone, Debug)]
pub struct TokenMask {
    allowed: SimpleVob,
}

impl TokenMask {
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.allowed.len() && self.allowed.is_allowed(token)
    }

    /// Sets every disallowed logit to -inf.
    pub fn apply(&self, logits: &mut [f32]) {
        let words = self.allowed.as_slice();
        for (chunk, &bits) in logits.chunks_mut(32).zip(words) {
            if bits == u32::MAX {
                continue;
            }
            if bits == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            for (j, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << j) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        // Ids past the mask (it is never narrower than the logits; defensive).
        let covered = words.len() * 32;
        if logits.len() > covered {
            logits[covered..].fill(f32::NEG_INFINITY);
        }
    }

    /// How many tokens are allowed.
    pub fn count(&self) -> usize {
        self.allowed.num_set()
    }
}

/// One sequence's parser state (see the module docs for the loop it drives).
pub struct TokenMatcher {
    inner: Matcher,
    vocab: ConstraintVocab,
}

impl TokenMatcher {
    /// The tokens allowed next. End-of-generation ids are allowed exactly when the output so
    /// far is complete; once [`Self::is_finished`], only they are.
    pub fn compute_mask(&mut self) -> Result<TokenMask, ConstraintError> {
        let v = &self.vocab.0;
        let mut allowed = self
            .inner
            .compute_mask_or_eos()
            .map_err(|e| ConstraintError::Matcher(e.to_string()))?;
        if allowed.len() < v.n_vocab {
            allowed.resize(v.n_vocab);
        }
        // The trie knows one EOS; every end-of-generation id stands with it.
        let eos = allowed.is_allowed(v.eos);
        for &t in &v.eog {
            allowed.set(t as usize, eos);
        }
        Ok(TokenMask { allowed })
    }

    /// Commits a sampled token. An end-of-generation token is accepted when the grammar is
    /// complete (it ends the sequence); any other token must be in the last mask.
    pub fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if self.vocab.0.eog.contains(&token) {
            let ok = self.inner.is_stopped()
                || self
                    .inner
                    .is_accepting()
                    .map_err(|e| ConstraintError::Matcher(e.to_string()))?;
            return if ok {
                Ok(())
            } else {
                Err(ConstraintError::Matcher(
                    "end of generation before the output is complete".into(),
                ))
            };
        }
        self.inner
            .consume_token(token)
            .map_err(|e| ConstraintError::Matcher(e.to_string()))
    }

    /// The grammar can take no more tokens: the output is complete and generation ends.
    pub fn is_finished(&self) -> bool {
        self.inner.is_stopped()
    }
}

/// Runs `work` (a forward pass) on this thread while `side` (committing tokens and computing
/// the next masks) runs on a helper thread, and returns both results. With nothing to do on
/// the side, `work` just runs.
pub fn overlap<T, S: Send>(work: impl FnOnce() -> T, side: impl FnOnce() -> S + Send) -> (T, S) {
    std::thread::scope(|s| {
        let helper = s.spawn(side);
        let done = work();
        let side = match helper.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (done, side)
    })
}
