//! A session: one sequence, its KV cache and position.

use crate::model::{Cache, Model, PassLogits};
use ferrolm_cpu::KvType;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    #[error("the prompt and generation need {need} positions, but the context holds {n_ctx}; raise -c or shorten the prompt")]
    ContextFull { need: usize, n_ctx: usize },
    #[error("token id {id} is out of range: the vocabulary has {n_vocab} tokens")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("the prompt is empty: there is nothing to generate from")]
    EmptyPrompt,
    #[error("decoding generated text: {0}")]
    Decode(String),
    #[error("{0}")]
    Backend(String),
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
}

/// Which positions of an evaluated batch get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

pub struct Session<'m, 'a> {
    model: &'m Model<'a>,
    /// Made on first use, so that creating a session cannot fail (a GPU cache may not fit).
    cache: Option<Cache>,
    n_ctx: usize,
    kv_type: KvType,
    ubatch: usize,
    /// The token at each cached position (its length is the position), so callers can
    /// reuse a shared prefix.
    tokens: Vec<u32>,
    /// The last [`Self::eval_last`]'s logits, in the runner's buffer until the next pass.
    last: Option<PassLogits>,
}

impl Drop for Session<'_, '_> {
    fn drop(&mut self) {
        if let Some(l) = self.last.take() {
            self.model.recycle_logits(l);
        }
    }
}

impl<'m, 'a> Session<'m, 'a> {
    /// A session with llama.cpp's default f16 KV cache.
    pub fn new(model: &'m Model<'a>, n_ctx: usize) -> Self {
        Self::with_kv_type(model, n_ctx, KvType::F16)
    }

    pub fn with_kv_type(model: &'m Model<'a>, n_ctx: usize, kv_type: KvType) -> Self {
        Self {
            model,
            cache: None,
            n_ctx,
            kv_type,
            ubatch: model.default_ubatch(),
            tokens: Vec::new(),
            last: None,
        }
    }

    /// Tokens per forward pass during prefill.
    pub fn set_ubatch(&mut self, n: usize) {
        self.ubatch = n.max(1);
    }

    pub fn n_past(&self) -> usize {
        self.tokens.len()
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The tokens held, one per position (`len() == n_past()`).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Allocates the KV cache now rather than on the first [`Self::eval`].
    pub fn reserve(&mut self) -> Result<(), EngineError> {
        if self.cache.is_none() {
            self.cache = Some(self.model.new_cache(self.n_ctx, self.kv_type)?);
        }
        Ok(())
    }

    /// Forgets everything after the first `n` positions.
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
    }

    /// Keeps the longest prefix of the cache that `prompt` starts with and returns its length:
    /// `prompt[returned..]` is what is left to evaluate. At least one token is always left,
    /// since evaluating something is the only way to get logits for the next position.
    pub fn reuse_prefix(&mut self, prompt: &[u32]) -> usize {
        let keep = common_prefix(&self.tokens, prompt).min(prompt.len().saturating_sub(1));
        self.truncate(keep);
        keep
    }

    /// Appends `tokens` to the sequence, in ubatches, and returns the requested logits
    /// (`[rows][n_vocab]`, rows in token order).
    pub fn eval(&mut self, tokens: &[u32], which: Logits) -> Result<Vec<f32>, EngineError> {
        let mut out = Vec::new();
        self.run(tokens, which, |model, logits| {
            out.extend_from_slice(&logits);
            model.recycle_logits(logits);
        })?;
        Ok(out)
    }

    /// [`Self::eval`] of the last token's logits, borrowed from the runner's buffer (kept until
    /// the next pass) rather than copied out: a decode loop that only reads them, as
    /// llama-bench's does, copies nothing more than the device's copy.
    pub fn eval_last(&mut self, tokens: &[u32]) -> Result<&[f32], EngineError> {
        if let Some(l) = self.last.take() {
            self.model.recycle_logits(l);
        }
        let mut last = None;
        self.run(tokens, Logits::Last, |model, logits| {
            if logits.is_empty() {
                model.recycle_logits(logits);
            } else {
                last = Some(logits);
            }
        })?;
        Ok(&**self.last.insert(last.unwrap_or_default()))
    }

    /// Runs `tokens` in ubatches, each pass's logits (`which` of its rows) handed to `take`.
    fn run(
        &mut self,
        tokens: &[u32],
        which: Logits,
        mut take: impl FnMut(&Model<'a>, PassLogits),
    ) -> Result<(), EngineError> {
        let n_vocab = self.model.cfg.n_vocab;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(EngineError::TokenOutOfRange { id, n_vocab });
        }
        let need = self.n_past() + tokens.len();
        if need > self.n_ctx() {
            return Err(EngineError::ContextFull {
                need,
                n_ctx: self.n_ctx(),
            });
        }
        self.reserve()?;
        let cache = self.cache.as_mut().expect("reserved above");
        for (i, chunk) in tokens.chunks(self.ubatch).enumerate() {
            let is_last_chunk = (i + 1) * self.ubatch >= tokens.len();
            let rows: Vec<usize> = match which {
                Logits::All => (0..chunk.len()).collect(),
                Logits::Last if is_last_chunk => vec![chunk.len() - 1],
                Logits::Last => vec![],
            };
            let logits = self.model.forward(cache, chunk, self.tokens.len(), &rows)?;
            take(self.model, logits);
            self.tokens.extend_from_slice(chunk);
        }
        Ok(())
    }
}

/// Length of the longest common prefix of `a` and `b`.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn common_prefix_lengths() {
        assert_eq!(common_prefix(&[], &[1, 2]), 0);
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 3]), 3);
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3, 4]), 2);
        assert_eq!(common_prefix(&[1, 9, 3], &[1, 2, 3]), 1);
        assert_eq!(common_prefix(&[5], &[1]), 0);
    }
}
