//! The GPU's KV pool as the scheduler spends it. Caches on a GPU are paged: a sequence takes
//! blocks as it grows, from one pool sized at start to what `--parallel` slots of `-c` tokens
//! would need, or to what free GPU memory holds when that is less. So that no pass ever finds
//! the pool empty, each admitted request is promised the blocks its prompt and answer can
//! reach (at most a context), and a request whose promise does not fit beside the running
//! ones waits in the queue. Idle slots keep their blocks for prefix reuse until an admission
//! needs them back.

use ferrolm_engine::{EngineError, KvType, Model};

/// The pool's size in blocks and positions a block, as the scheduler budgets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvBudget {
    pub n_blocks: usize,
    pub block: usize,
    n_ctx: usize,
}

impl KvBudget {
    /// Makes the model's shared pool for `parallel` slots of `n_ctx` positions, smaller when
    /// free memory holds less, or of `asked` blocks; never less than one whole context and the
    /// block a shared prefix may need copied. `None` where caches are not paged (the CPU,
    /// `-ngl` partial): there each slot's cache is whole from the start.
    pub fn reserve(
        model: &Model,
        parallel: usize,
        n_ctx: usize,
        kv_type: KvType,
        asked: Option<usize>,
    ) -> Result<Option<Self>, EngineError> {
        let block = model.kv_block(n_ctx);
        let whole = model.kv_blocks_for(parallel, n_ctx);
        let (Some(block), Some(whole), true) = (block, whole, model.kv_is_paged()) else {
            return Ok(None);
        };
        let fit = model.kv_blocks_that_fit(kv_type, n_ctx)?.unwrap_or(0);
        let n_blocks = asked
            .unwrap_or(whole.min(fit))
            .max(n_ctx.div_ceil(block) + 1);
        model.reserve_kv(n_blocks, n_ctx, kv_type)?;
        Ok(Some(Self {
            n_blocks,
            block,
            n_ctx,
        }))
    }

    /// Blocks promised to a request of `prompt` tokens that may generate `max_tokens`: its
    /// positions to the end of the answer (at most a context), and one more for the block a
    /// reused prefix shares with another slot, which is copied when first written.
    pub fn promise(&self, prompt: usize, max_tokens: Option<usize>) -> usize {
        let positions = prompt
            .saturating_add(max_tokens.unwrap_or(usize::MAX))
            .min(self.n_ctx);
        (positions.div_ceil(self.block) + 1).min(self.n_blocks)
    }

    /// Whether a request promised `need` blocks fits beside running ones promised `promised`.
    pub fn admits(&self, promised: usize, need: usize) -> bool {
        promised + need <= self.n_blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(n_blocks: usize) -> KvBudget {
        KvBudget {
            n_blocks,
            block: 64,
            n_ctx: 1024,
        }
    }

    #[test]
    fn a_promise_covers_prompt_and_answer_up_to_a_context() {
        let b = budget(1000);
        assert_eq!(b.promise(100, Some(28)), 2 + 1);
        assert_eq!(b.promise(100, Some(29)), 3 + 1);
        // No max_tokens, or one past the context: the whole context.
        assert_eq!(b.promise(100, None), 16 + 1);
        assert_eq!(b.promise(1000, Some(5000)), 16 + 1);
        // Never more than the pool.
        assert_eq!(budget(4).promise(100, None), 4);
    }

    #[test]
    fn admission_counts_what_running_requests_were_promised() {
        let b = budget(40);
        assert!(b.admits(0, 17));
        assert!(b.admits(23, 17));
        assert!(!b.admits(24, 17));
    }
}
