//! What a pass's ops read and write on the device, lent from the backend's pools: activations
//! ([`CudaAct`]) and the pass's token ids and positions ([`CudaInputs`]).

use super::moe::RouteMark;
use super::pool::Pool;
use crate::error::{DriverContext, Result};
use crate::ops::{ActQuant, RowsTable};
use cudarc::driver::{CudaSlice, CudaStream};
use ferrolm_model::backend::{InputRows, PassInputs};
use std::cell::{Ref, RefCell};
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// Row-major activations on the device: `rows` of `width` floats, returned to the pools on
/// drop.
pub struct CudaAct {
    /// Taken out only by `drop`, to go back to `pool`.
    buf: ManuallyDrop<CudaSlice<f32>>,
    /// The same values as activation blocks (and how they were quantized), when an op produced
    /// them alongside (a norm feeding matmuls); dropped by anything that writes `buf`.
    pub(super) q8: Option<(CudaSlice<u8>, ActQuant)>,
    /// The same values rounded to f16, when an op produced them alongside for the f16
    /// products after it (a batched step's norm or SwiGLU); dropped by anything that writes
    /// `buf`.
    pub(super) f16: Option<CudaSlice<u16>>,
    /// Set by the norm that routed these rows for the MoE FFN after it (`add_rms_norm_moe`):
    /// which routing in the MoE scratch is theirs; dropped by anything that writes `buf`.
    pub(super) routed: Option<RouteMark>,
    pub rows: usize,
    pub width: usize,
    pool: Arc<Pool<f32>>,
    bytes: Arc<Pool<u8>>,
    halves: Arc<Pool<u16>>,
}

impl CudaAct {
    /// `rows × width` activations in `buf`, a buffer of `pool`'s.
    pub(super) fn new(
        buf: CudaSlice<f32>,
        rows: usize,
        width: usize,
        pool: Arc<Pool<f32>>,
        bytes: Arc<Pool<u8>>,
        halves: Arc<Pool<u16>>,
    ) -> Self {
        Self {
            buf: ManuallyDrop::new(buf),
            q8: None,
            f16: None,
            routed: None,
            rows,
            width,
            pool,
            bytes,
            halves,
        }
    }

    pub(super) fn buf(&self) -> &CudaSlice<f32> {
        &self.buf
    }

    /// For writing: the Q8_1 and f16 copies no longer match and go back to their pools, and a
    /// routing of the old rows is no longer theirs.
    pub(super) fn buf_mut(&mut self) -> &mut CudaSlice<f32> {
        self.routed = None;
        self.drop_copies();
        &mut self.buf
    }

    /// `buf` (for writing, as [`Self::buf_mut`]) and an f16 buffer of as many values, which
    /// becomes this activation's f16 copy: for the ops that write both.
    pub(super) fn buf_and_f16(&mut self) -> Result<(&mut CudaSlice<f32>, &mut CudaSlice<u16>)> {
        self.routed = None;
        self.drop_copies();
        let h = self.halves.take(self.rows * self.width)?;
        let h = self.f16.insert(h);
        Ok((&mut self.buf, h))
    }

    fn drop_copies(&mut self) {
        if let Some((q, _)) = self.q8.take() {
            self.bytes.give(q);
        }
        if let Some(h) = self.f16.take() {
            self.halves.give(h);
        }
    }
}

impl Drop for CudaAct {
    fn drop(&mut self) {
        // SAFETY: `buf` is taken once, here, and never touched after.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        self.pool.give(buf);
        self.drop_copies();
    }
}

/// A pass's token ids and positions on the device, copied once per pass; every op of the pass
/// reads them here. A captured decode graph keeps the ones it was captured with and has them
/// rewritten before each replay ([`Self::write`]).
pub struct CudaInputs {
    /// Taken out only by `drop`, to go back to `pool`.
    tokens: ManuallyDrop<CudaSlice<u32>>,
    positions: ManuallyDrop<CudaSlice<u32>>,
    rows: usize,
    pool: Arc<Pool<u32>>,
    /// Where each row's sequence keeps its keys and values, when the pass's decode rows of
    /// several sequences take one attention launch a layer (`backend/rows.rs`).
    pub(super) rows_table: Option<RowsTable>,
    /// The pass's RoPE cos/sin table, made by the first rotation that asks
    /// ([`Self::rope_table`]).
    rope_table: RefCell<Option<RopeTable>>,
}

/// A RoPE table (`rope_table_f32`) and the rotation arguments it was made for.
struct RopeTable {
    key: RopeKey,
    buf: CudaSlice<u32>,
    /// Made from the positions now in the inputs: false after [`CudaInputs::write`] until made
    /// again. (A captured graph remakes it itself: the launch that made it is in the graph.)
    current: bool,
}

/// What a RoPE table depends on besides the positions: the head size and the rotation's
/// arguments (the factors by the address of their weight, which does not move during a pass).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct RopeKey {
    pub head_dim: usize,
    pub base_bits: u32,
    pub scale_bits: [u32; 5],
    pub factors: usize,
}

impl CudaInputs {
    /// Buffers for `rows` tokens from `pool` (unspecified contents until [`Self::write`]).
    pub(super) fn take(pool: &Arc<Pool<u32>>, rows: usize) -> Result<Self> {
        Ok(Self {
            tokens: ManuallyDrop::new(pool.take(rows)?),
            positions: ManuallyDrop::new(pool.take(rows)?),
            rows,
            pool: pool.clone(),
            rows_table: None,
            rope_table: RefCell::new(None),
        })
    }

    /// Copies the pass's token ids and positions in (same row count).
    pub(super) fn write(&mut self, stream: &Arc<CudaStream>, pass: &PassInputs<'_>) -> Result<()> {
        assert_eq!(
            pass.positions.len(),
            pass.tokens.len(),
            "one position per token"
        );
        assert_eq!(pass.tokens.len(), self.rows, "inputs of another batch size");
        stream
            .memcpy_htod(pass.tokens, &mut *self.tokens)
            .during("copying token ids")?;
        stream
            .memcpy_htod(pass.positions, &mut *self.positions)
            .during("copying positions")?;
        if let Some(t) = self.rope_table.get_mut() {
            t.current = false;
        }
        Ok(())
    }

    /// The pass's RoPE table for `key`, made by `make` (into a buffer of
    /// [`rope_table_len`](crate::ops::rope_table_len) `u32`s) when it is not made yet for
    /// these positions. `None` when the pass already holds a table for other arguments (a
    /// model whose layers rotate differently): that rotation computes its own angles.
    pub(super) fn rope_table(
        &self,
        key: RopeKey,
        make: impl FnOnce(&mut CudaSlice<u32>) -> Result<()>,
    ) -> Result<Option<Ref<'_, CudaSlice<u32>>>> {
        let mut cell = self.rope_table.borrow_mut();
        if cell.is_none() {
            let buf = self
                .pool
                .take(crate::ops::rope_table_len(self.rows, key.head_dim))?;
            *cell = Some(RopeTable {
                key,
                buf,
                current: false,
            });
        }
        let t = cell.as_mut().expect("made above");
        if t.key != key {
            return Ok(None);
        }
        if !t.current {
            make(&mut t.buf)?;
            t.current = true;
        }
        drop(cell);
        Ok(Some(Ref::map(self.rope_table.borrow(), |t| {
            &t.as_ref().expect("made above").buf
        })))
    }

    pub(super) fn tokens(&self) -> &CudaSlice<u32> {
        &self.tokens
    }

    pub(super) fn positions(&self) -> &CudaSlice<u32> {
        &self.positions
    }

    pub(super) fn rows_table(&self) -> Option<&RowsTable> {
        self.rows_table.as_ref()
    }
}

impl InputRows for CudaInputs {
    fn rows(&self) -> usize {
        self.rows
    }
}

impl Drop for CudaInputs {
    fn drop(&mut self) {
        // SAFETY: both buffers are taken once, here, and never touched after.
        let (t, p) = unsafe {
            (
                ManuallyDrop::take(&mut self.tokens),
                ManuallyDrop::take(&mut self.positions),
            )
        };
        self.pool.give(t);
        self.pool.give(p);
        if let Some(table) = self.rope_table.get_mut().take() {
            self.pool.give(table.buf);
        }
    }
}
