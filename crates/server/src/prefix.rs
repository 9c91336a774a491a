//! Prefix reuse: which slot a new request takes, and where its prompt's computed start comes
//! from.
//!
//! Every slot remembers the tokens its cache holds at positions `0..len`: a finished or idle
//! slot keeps its last sequence's, and a running slot's grow as its prompt is prefilled and
//! its tokens are fed back. A new prompt that starts with some of those tokens need not
//! compute them again:
//! - its own slot already holds them (the chat case: the conversation grows in the slot that
//!   served its last turn): the sequence starts at that position, nothing is copied;
//! - another slot holds a longer start (a shared system prompt): those positions are copied
//!   into the new slot's cache ([`ferrolm_engine::Model::copy_cache_prefix`]) first.
//!
//! The K/V rows of a position depend only on the tokens up to it, and the server's passes are
//! row-independent (batch-invariant mode), so on the CPU the answer is bit-identical to the
//! one computed from scratch (`crates/cli/tests/serve_prefix.rs` checks it through HTTP).

use ferrolm_engine::common_prefix;

/// Shortest gain, in tokens, that a copy from another slot must bring over what the target
/// slot already holds: below it, the copy (every layer's K and V for the whole prefix) is
/// not worth its bookkeeping, and a short match is mostly the chat template's header.
pub const MIN_COPY: usize = 32;

/// What a slot offers the chooser.
pub struct SlotView<'a> {
    /// Tokens at positions `0..len` of the slot's cache.
    pub tokens: &'a [u32],
    /// No sequence runs in it: a new request may take it.
    pub free: bool,
    /// When the slot last held a sequence (larger: later); the least recently used free slot
    /// is overwritten first, keeping fresher caches for the requests that follow.
    pub last_used: u64,
}

/// Where a new request goes.
#[derive(Debug, PartialEq, Eq)]
pub struct Placement {
    /// The free slot it takes.
    pub slot: usize,
    /// Another slot whose first `reused` positions are copied into `slot`'s cache; `None`
    /// when they are `slot`'s own (or nothing is reused).
    pub copy_from: Option<usize>,
    /// Prompt tokens not computed again (at most the prompt's length minus one: the last
    /// token is always evaluated, for its logits).
    pub reused: usize,
}

/// Places `prompt` in a free slot; `None` when every slot is busy. With `reuse` off, the
/// first free slot and nothing reused.
pub fn place(slots: &[SlotView], prompt: &[u32], reuse: bool) -> Option<Placement> {
    if !reuse {
        let slot = slots.iter().position(|s| s.free)?;
        return Some(Placement {
            slot,
            copy_from: None,
            reused: 0,
        });
    }
    let limit = prompt.len().saturating_sub(1);
    let matched = |s: &SlotView| common_prefix(s.tokens, prompt).min(limit);
    // The free slot with the longest own match; among equals, the least recently used.
    let (slot, own) = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.free)
        .map(|(i, s)| (i, matched(s), s.last_used))
        .max_by_key(|&(_, m, used)| (m, std::cmp::Reverse(used)))
        .map(|(i, m, _)| (i, m))?;
    // The longest match anywhere, running slots included.
    let best = slots
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != slot)
        .map(|(i, s)| (i, matched(s)))
        .max_by_key(|&(i, m)| (m, std::cmp::Reverse(i)));
    Some(match best {
        Some((from, m)) if m >= own + MIN_COPY => Placement {
            slot,
            copy_from: Some(from),
            reused: m,
        },
        _ => Placement {
            slot,
            copy_from: None,
            reused: own,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(tokens: &[u32], free: bool, last_used: u64) -> SlotView<'_> {
        SlotView {
            tokens,
            free,
            last_used,
        }
    }

    #[test]
    fn own_slot_copy_and_minimum() {
        let system: Vec<u32> = (0..100).collect();
        let mut prompt = system.clone();
        prompt.extend([500, 501]);
        let empty: &[u32] = &[];
        // A running slot holds the system prompt; the free one holds nothing: copy.
        let slots = [view(&system, false, 1), view(empty, true, 0)];
        assert_eq!(
            place(&slots, &prompt, true),
            Some(Placement {
                slot: 1,
                copy_from: Some(0),
                reused: 100
            })
        );
        // Off: nothing reused.
        assert_eq!(place(&slots, &prompt, false).unwrap().reused, 0);
        // The free slot already holds most of it: no copy for a gain under MIN_COPY.
        let most = &system[..90];
        let slots = [view(&system, false, 1), view(most, true, 0)];
        assert_eq!(
            place(&slots, &prompt, true),
            Some(Placement {
                slot: 1,
                copy_from: None,
                reused: 90
            })
        );
        // A short match elsewhere is not copied.
        let short = &system[..MIN_COPY - 1];
        let slots = [view(short, false, 1), view(empty, true, 0)];
        assert_eq!(place(&slots, &prompt, true).unwrap().reused, 0);
        // Every slot busy: nowhere to go.
        assert_eq!(place(&[view(&system, false, 0)], &prompt, true), None);
    }

    #[test]
    fn the_last_prompt_token_is_always_evaluated_and_lru_goes_first() {
        let p: Vec<u32> = (0..50).collect();
        let slots = [view(&p, true, 3)];
        assert_eq!(place(&slots, &p, true).unwrap().reused, 49);
        // No match anywhere: the least recently used free slot.
        let other = [9u32; 4];
        let slots = [
            view(&other, true, 5),
            view(&other, true, 2),
            view(&other, false, 1),
        ];
        assert_eq!(place(&slots, &p, true).unwrap().slot, 1);
    }
}
