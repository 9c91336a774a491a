//! The host half of the paged KV cache (`kv_cache.rs`): which blocks of a pool are free, how
//! many sequences' tables hold each, and what a table must change before positions are written
//! into it. No device memory here, so these rules are tested without a GPU; `kv_cache.rs`
//! queues the block copies they ask for and uploads the tables.

/// A pool's blocks: the free ones, and each block's count of tables holding it.
pub(super) struct Blocks {
    free: Vec<u32>,
    refs: Vec<u32>,
}

impl Blocks {
    /// `n` free blocks, handed out from block 0 up.
    pub fn new(n: usize) -> Self {
        Self {
            free: (0..n as u32).rev().collect(),
            refs: vec![0; n],
        }
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// A free block, now held once; `None` when every block is held.
    pub fn take(&mut self) -> Option<u32> {
        let b = self.free.pop()?;
        self.refs[b as usize] = 1;
        Some(b)
    }

    /// Every free block, each now held once, in the order `take` would give them.
    pub fn take_all(&mut self) -> Vec<u32> {
        std::iter::from_fn(|| self.take()).collect()
    }

    /// One more table holds `b`.
    pub fn share(&mut self, b: u32) {
        self.refs[b as usize] += 1;
    }

    /// One table fewer holds `b`; free when none does.
    pub fn release(&mut self, b: u32) {
        let r = &mut self.refs[b as usize];
        *r -= 1;
        if *r == 0 {
            self.free.push(b);
        }
    }

    /// Makes `table` (blocks of `2^shift` positions) ready for positions `from..to` to be
    /// written: every block of that range that another table also holds is replaced by a
    /// block of its own, whose contents must first be copied from the shared one (each
    /// (shared, own) pair is pushed to `copies`), and blocks are appended until `to` is
    /// covered. Returns the first index of `table` that changed (`table.len()` before, when
    /// only appended), or that index as the error when the pool ran out midway: what was done
    /// stays done, and the copies already pushed are still owed.
    pub fn prepare_write(
        &mut self,
        table: &mut Vec<u32>,
        shift: u32,
        from: usize,
        to: usize,
        copies: &mut Vec<(u32, u32)>,
    ) -> Result<usize, usize> {
        let mut first = table.len();
        let written = (from >> shift)..to.div_ceil(1 << shift);
        for (i, block) in table.iter_mut().enumerate() {
            if !written.contains(&i) || self.refs[*block as usize] == 1 {
                continue;
            }
            let Some(own) = self.take() else {
                return Err(first);
            };
            copies.push((*block, own));
            self.release(*block); // still held by the others
            *block = own;
            first = first.min(i);
        }
        while table.len() << shift < to {
            let Some(b) = self.take() else {
                return Err(first);
            };
            table.push(b);
        }
        Ok(first)
    }

    /// Keeps the first `keep` blocks of `table`, releasing the rest.
    pub fn truncate(&mut self, table: &mut Vec<u32>, keep: usize) {
        while table.len() > keep {
            let b = table.pop().expect("longer than keep");
            self.release(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_taken_in_order_and_freed_when_no_table_holds_them() {
        let mut p = Blocks::new(3);
        assert_eq!((p.take(), p.take()), (Some(0), Some(1)));
        p.share(1);
        p.release(1);
        assert_eq!(p.free_count(), 1, "block 1 is still held once");
        p.release(1);
        assert_eq!(p.free_count(), 2);
        assert_eq!(p.take_all().len(), 2);
        assert_eq!(p.take(), None);
    }

    #[test]
    fn a_write_appends_blocks_up_to_its_end() {
        let mut p = Blocks::new(8);
        let (mut t, mut copies) = (Vec::new(), Vec::new());
        // Blocks of 4 positions: positions 0..9 need three.
        assert_eq!(p.prepare_write(&mut t, 2, 0, 9, &mut copies), Ok(0));
        assert_eq!(t, [0, 1, 2]);
        // Within what the table holds: nothing changes.
        assert_eq!(p.prepare_write(&mut t, 2, 9, 12, &mut copies), Ok(3));
        assert_eq!(t.len(), 3);
        assert!(copies.is_empty());
    }

    #[test]
    fn a_shared_block_is_copied_before_it_is_written_and_whole_ones_stay_shared() {
        let mut p = Blocks::new(8);
        let (mut a, mut copies) = (Vec::new(), Vec::new());
        p.prepare_write(&mut a, 2, 0, 10, &mut copies).unwrap(); // blocks 0, 1, 2
                                                                 // b shares a's first 10 positions: all three blocks, the last one partly.
        let mut b = a.clone();
        b.iter().for_each(|&x| p.share(x));
        // b writes position 10 (in block 2): block 2 becomes b's own, a copy of a's.
        assert_eq!(p.prepare_write(&mut b, 2, 10, 11, &mut copies), Ok(2));
        assert_eq!(copies, [(2, 3)]);
        assert_eq!(b, [0, 1, 3]);
        // a writes position 10 too: block 2 is its alone now, nothing to copy.
        copies.clear();
        assert_eq!(p.prepare_write(&mut a, 2, 10, 11, &mut copies), Ok(3));
        assert!(copies.is_empty());
        assert_eq!(a, [0, 1, 2]);
        // Dropping both gives every block back.
        p.truncate(&mut a, 0);
        assert_eq!(p.free_count(), 8 - 4 + 1, "blocks 0 and 1 are still b's");
        p.truncate(&mut b, 0);
        assert_eq!(p.free_count(), 8);
    }

    #[test]
    fn a_pool_that_runs_out_keeps_what_it_gave_and_says_where_the_table_changed() {
        let mut p = Blocks::new(3);
        let (mut a, mut copies) = (Vec::new(), Vec::new());
        p.prepare_write(&mut a, 2, 0, 8, &mut copies).unwrap(); // blocks 0, 1
        let mut b = a.clone();
        b.iter().for_each(|&x| p.share(x));
        // b rewrites from position 0 to 12: two copies and one more block, but one is free.
        assert_eq!(p.prepare_write(&mut b, 2, 0, 12, &mut copies), Err(0));
        assert_eq!(copies, [(0, 2)]);
        assert_eq!(b, [2, 1]);
        assert_eq!(p.free_count(), 0);
        // Truncating b frees its own block; block 1 stays a's.
        p.truncate(&mut b, 0);
        assert_eq!(p.free_count(), 1);
    }
}
