//! The paged KV cache on the device: its element types ([`KvFormat`]: f16, f32, or llama.cpp's
//! q8_0/q4_0 blocks); one pool of blocks for every sequence ([`KvPool`]: each layer's keys and
//! values, blocks of `2^shift` positions, block `b` holding `[n_kv_head][2^shift][row]`); a
//! sequence's blocks ([`BlockTable`]: taken as it grows, shared with another sequence for a
//! common prefix, copied before a shared block is written, returned when it ends); and one
//! layer of one sequence as the kernels see it ([`KvCache`]), at the head sizes
//! `kernels/attention.cu` and `attention_prefill.cu` have kernels for (`ATTN_HEAD_DIMS`). The
//! kernels that store into it and attend over it are `attention.rs`'s and
//! `attention_rows.rs`'s; they find a position's row through the table (common.cuh's KvPages).
//!
//! Paging changes addresses only: every kernel reads and writes the same values, in the same
//! order, as over the contiguous cache it replaced.

use super::attention::dim_index;
use super::kv_blocks::Blocks;
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::{Arc, Mutex};

/// The KV cache's element type on the device (`-ctk`/`-ctv`, one type for both).
/// [`ALL`](Self::ALL) lists them in the order of [`index`](Self::index) (the launcher's
/// per-format tables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvFormat {
    #[default]
    F16,
    /// quant.cuh's `block_q8_0`: an f16 scale and 32 codes, 34 bytes.
    Q8_0,
    /// quant.cuh's `block_q4_0`: an f16 scale and 32 nibbles, 18 bytes.
    Q4_0,
    /// Plain f32 (`-ctk f32 -ctv f32`, llama.cpp's precise configuration): 4 bytes an
    /// element, any head size. Read by the kernels that take an element type (flash-decoding
    /// a query head a block, the scalar and CPU-order prefills), not by the f16-only ones.
    F32,
}

impl KvFormat {
    /// In [`index`](Self::index) order.
    pub(super) const ALL: [KvFormat; 4] =
        [KvFormat::F16, KvFormat::Q8_0, KvFormat::Q4_0, KvFormat::F32];

    /// llama.cpp's name.
    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F16 => "f16",
            KvFormat::Q8_0 => "q8_0",
            KvFormat::Q4_0 => "q4_0",
            KvFormat::F32 => "f32",
        }
    }

    /// A block format (q8_0, q4_0; ggml's `ggml_is_quantized`): rows of whole 32-element
    /// blocks, rotated by llama.cpp's Walsh-Hadamard transform, queries rounded through Q8_0
    /// for the CPU's integer dots. Not f16 or f32.
    pub fn is_block(self) -> bool {
        matches!(self, KvFormat::Q8_0 | KvFormat::Q4_0)
    }

    /// Whether a cache of this format can hold heads of `head_dim` (block formats: whole
    /// 32-element blocks a row, as the CPU's `KvType::check`).
    pub fn holds(self, head_dim: usize) -> bool {
        !self.is_block() || head_dim.is_multiple_of(32)
    }

    /// Bytes of a row of `elems` elements (a multiple of 32 for the block formats).
    pub fn row_bytes(self, elems: usize) -> usize {
        match self {
            KvFormat::F16 => 2 * elems,
            KvFormat::Q8_0 => elems / 32 * 34,
            KvFormat::Q4_0 => elems / 32 * 18,
            KvFormat::F32 => 4 * elems,
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The kernels' name infix: `attn_decode_split_q8_0_d64`, `attn_prefill_f32_d80`; f16's
    /// have none.
    pub(super) fn infix(self) -> String {
        match self {
            KvFormat::F16 => String::new(),
            q => format!("_{}", q.name()),
        }
    }
}

/// The kernels' `KvPages` (common.cuh), passed by value (its layout: a pointer, two ints, no
/// padding): a sequence's block table, the block size's shift and the KV heads a block holds.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KvPagesArg {
    blocks: u64,
    shift: i32,
    n_kv_head: i32,
}

impl KvPagesArg {
    /// The block table's device address.
    pub fn blocks_addr(&self) -> u64 {
        self.blocks
    }

    /// log2 of the positions a block.
    pub fn shift(&self) -> i32 {
        self.shift
    }
}

/// Every layer's keys and values of one format, in blocks that sequences take from and
/// return to it. A pool is made for one sequence (its blocks cover that sequence's `n_ctx`),
/// or for many ([`crate::CudaModel::reserve_kv`]): then `-c` is a limit and memory is spent as
/// sequences grow.
pub struct KvPool {
    /// `[layer]` (K, V): `n_blocks * n_kv_head << shift` rows each.
    layers: Vec<(CudaSlice<u8>, CudaSlice<u8>)>,
    pub format: KvFormat,
    pub n_kv_head: usize,
    pub head_dim: usize,
    shift: u32,
    n_blocks: usize,
    blocks: Mutex<Blocks>,
    stream: Arc<CudaStream>,
}

impl KvPool {
    /// A pool of `n_blocks` blocks of `block` positions (a power of two) for `n_layer` layers.
    pub fn new(
        dev: &CudaDevice,
        format: KvFormat,
        n_layer: usize,
        n_kv_head: usize,
        head_dim: usize,
        block: usize,
        n_blocks: usize,
    ) -> Result<Self> {
        if !format.holds(head_dim) {
            return Err(CudaError::Invalid(format!(
                "a {} KV cache needs a head size that is a multiple of 32, not {head_dim}",
                format.name()
            )));
        }
        dim_index(head_dim)?; // a model the kernels cannot attend for fails at load
        if !block.is_power_of_two() || n_blocks == 0 || n_blocks > u32::MAX as usize {
            return Err(CudaError::Invalid(format!(
                "a KV pool of {n_blocks} blocks of {block} positions"
            )));
        }
        let bytes = n_blocks * block * n_kv_head * format.row_bytes(head_dim);
        let layers = (0..n_layer)
            .map(|_| Ok((dev.zeros(bytes)?, dev.zeros(bytes)?)))
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            format,
            n_kv_head,
            head_dim,
            shift: block.trailing_zeros(),
            n_blocks,
            blocks: Mutex::new(Blocks::new(n_blocks)),
            stream: dev.stream().clone(),
        })
    }

    /// Positions a block.
    pub fn block(&self) -> usize {
        1 << self.shift
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// Blocks no sequence holds.
    pub fn free_blocks(&self) -> usize {
        self.lock().free_count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn full(&self) -> CudaError {
        CudaError::Invalid(format!(
            "the KV cache is full: all {} blocks of {} positions are held by sequences",
            self.n_blocks,
            self.block()
        ))
    }

    /// Bytes of one block of one layer's K (or V).
    fn block_bytes(&self) -> usize {
        (self.n_kv_head << self.shift) * self.format.row_bytes(self.head_dim)
    }

    /// Block `from`'s keys and values copied into block `to`, every layer (queued).
    fn copy_block(&self, from: u32, to: u32) -> Result<()> {
        copy_blocks(self, from, self, to)
    }
}

/// Block `from` of pool `a` copied into block `to` of pool `b` (pools of one shape, or the
/// same pool and two blocks), keys and values of every layer, queued on `b`'s stream.
fn copy_blocks(a: &KvPool, from: u32, b: &KvPool, to: u32) -> Result<()> {
    let bytes = b.block_bytes();
    let (from, to) = ((from as usize * bytes) as u64, (to as usize * bytes) as u64);
    for (s, d) in a.layers.iter().zip(&b.layers) {
        for (s, d) in [(&s.0, &d.0), (&s.1, &d.1)] {
            let (s, d) = (s.device_ptr(&a.stream).0, d.device_ptr(&b.stream).0);
            // SAFETY: whole blocks (ids below each pool's n_blocks, block_bytes alike: the
            // callers' pools have one shape) inside the two allocations, distinct when they
            // are one pool's; queued on the stream every kernel of the pools runs on.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    d + to,
                    s + from,
                    bytes,
                    b.stream.cu_stream(),
                )
            }
            .during("copying a KV block")?;
        }
    }
    Ok(())
}

/// One sequence's blocks in a [`KvPool`]: `blocks[i]` holds its positions `i << shift ..`.
/// The device copy has room for a whole `n_ctx` from the start, so its address never changes
/// (captured graphs keep reading it); entries are uploaded as blocks are added.
pub struct BlockTable {
    pool: Arc<KvPool>,
    blocks: Vec<u32>,
    dev: CudaSlice<u32>,
    /// Entries `..synced` of `blocks` are on the device as they are here.
    synced: usize,
    n_ctx: usize,
}

impl BlockTable {
    /// An empty table for up to `n_ctx` positions of `pool`.
    pub fn new(dev: &CudaDevice, pool: Arc<KvPool>, n_ctx: usize) -> Result<Self> {
        let cap = n_ctx.div_ceil(pool.block()).max(1);
        Ok(Self {
            dev: dev.zeros(cap)?,
            pool,
            blocks: Vec::with_capacity(cap),
            synced: 0,
            n_ctx,
        })
    }

    pub fn pool(&self) -> &Arc<KvPool> {
        &self.pool
    }

    /// Positions its blocks cover.
    pub fn positions(&self) -> usize {
        self.blocks.len() << self.pool.shift
    }

    /// Blocks it holds.
    pub fn n_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Ready for positions `from..to` to be written: blocks taken up to `to`, and any block
    /// of that range that another table shares replaced by a copy of its own (copy on write).
    /// An error, holding what it took, when the pool has too few blocks.
    pub fn prepare_write(&mut self, from: usize, to: usize) -> Result<()> {
        if to > self.n_ctx {
            return Err(CudaError::Invalid(format!(
                "writing position {} of a KV cache of {} positions",
                to - 1,
                self.n_ctx
            )));
        }
        let taken = self.take_for_write(from, to);
        // What was taken is listed on the device even when the pool ran out midway.
        self.sync()?;
        taken
    }

    fn take_for_write(&mut self, from: usize, to: usize) -> Result<()> {
        let mut copies = Vec::new();
        let planned = self.pool.lock().prepare_write(
            &mut self.blocks,
            self.pool.shift,
            from,
            to,
            &mut copies,
        );
        let first = planned.unwrap_or_else(|first| first);
        self.synced = self.synced.min(first);
        // Queued before any kernel of the pass that writes the new blocks.
        for (shared, own) in copies {
            self.pool.copy_block(shared, own)?;
        }
        planned.map(|_| ()).map_err(|_| self.pool.full())
    }

    /// Uploads the entries changed since the last upload.
    fn sync(&mut self) -> Result<()> {
        let (i, n) = (self.synced, self.blocks.len());
        if i < n {
            self.pool
                .stream
                .memcpy_htod(&self.blocks[i..], &mut self.dev.slice_mut(i..n))
                .during("copying a KV block table")?;
        }
        self.synced = n;
        Ok(())
    }

    /// Keeps positions `..n` only: whole blocks past them go back to the pool.
    pub fn truncate(&mut self, n: usize) {
        let keep = n.div_ceil(self.pool.block());
        self.pool.lock().truncate(&mut self.blocks, keep);
        self.synced = self.synced.min(keep);
    }

    /// Positions `..n` of `src` (a table of the same pool) become this table's, which gives up
    /// what it held: whole blocks shared (a later write copies them), no copy queued at all.
    pub fn share_prefix(&mut self, src: &BlockTable, n: usize) -> Result<()> {
        if !Arc::ptr_eq(&self.pool, &src.pool) || n > src.positions().min(self.n_ctx) {
            return Err(CudaError::Invalid(format!(
                "sharing {n} positions of a KV cache of another pool or fewer positions"
            )));
        }
        self.truncate(0);
        {
            let mut blocks = self.pool.lock();
            for &b in &src.blocks[..n.div_ceil(self.pool.block())] {
                blocks.share(b);
                self.blocks.push(b);
            }
        }
        self.sync()
    }

    /// Positions `..n` of `src` become this table's, which gives up what it held: shared
    /// with `src` when both are of one pool ([`Self::share_prefix`]), else copied block by
    /// block into blocks of its own (pools of one shape and block size).
    pub fn take_prefix(&mut self, src: &BlockTable, n: usize) -> Result<()> {
        if Arc::ptr_eq(&self.pool, &src.pool) {
            return self.share_prefix(src, n);
        }
        let (a, b) = (src.pool.clone(), self.pool.clone());
        let same = a.format == b.format
            && a.shift == b.shift
            && a.n_kv_head == b.n_kv_head
            && a.head_dim == b.head_dim
            && a.layers.len() == b.layers.len();
        if !same || n > src.positions() {
            return Err(CudaError::Invalid(format!(
                "copying {n} positions between KV caches of other shapes, or past what the \
                 source holds ({})",
                src.positions()
            )));
        }
        self.truncate(0);
        self.prepare_write(0, n)?;
        // prepare_write took exactly the blocks that cover n.
        for (&from, &to) in src.blocks.iter().zip(&self.blocks) {
            copy_blocks(&a, from, &b, to)?;
        }
        Ok(())
    }

    /// The kernels' view of it.
    pub fn pages(&self) -> KvPagesArg {
        KvPagesArg {
            blocks: self.dev.device_ptr(&self.pool.stream).0,
            shift: self.pool.shift as i32,
            n_kv_head: self.pool.n_kv_head as i32,
        }
    }
}

impl Drop for BlockTable {
    fn drop(&mut self) {
        self.truncate(0);
    }
}

/// One layer of one sequence's cache as the kernels take it: the pool's K and V of that
/// layer, and the sequence's block table, by address. Made by [`CudaCache`](crate::CudaCache)
/// for each of its layers (it owns the table), or alone by [`KvCache::new`], which owns a
/// pool and table of its own.
pub struct KvCache {
    pub format: KvFormat,
    pub n_ctx: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// llama.cpp's Walsh-Hadamard rotation of a quantized cache, as the CPU's `LayerKv`: k (and
    /// q) rotated in chunks of `k_rot`, v in chunks of `v_rot` (and the output back); the
    /// caller rotates (`Elementwise::hadamard`), the kernels see rotated values only.
    pub k_rot: Option<usize>,
    pub v_rot: Option<usize>,
    pool: Arc<KvPool>,
    layer: usize,
    pages: KvPagesArg,
    /// A cache made alone ([`KvCache::new`]) holds its table here.
    own: Option<BlockTable>,
}

impl KvCache {
    /// Layer `layer` of the sequence whose blocks `table` lists. The table must outlive the
    /// view (its owner keeps both).
    pub fn view(table: &BlockTable, layer: usize) -> Self {
        let pool = table.pool.clone();
        assert!(
            layer < pool.layers.len(),
            "KV view of a layer past the pool's"
        );
        let (format, head_dim) = (pool.format, pool.head_dim);
        // As ferrolm_cpu::hadamard: K in the largest power of two from 64 dividing head_dim
        // (at most 256 among ATTN_HEAD_DIMS), V in 64s, when 64 divides head_dim.
        let rot = (format.is_block() && head_dim.is_multiple_of(64)).then_some(64);
        Self {
            format,
            n_ctx: table.n_ctx,
            n_kv_head: pool.n_kv_head,
            head_dim,
            k_rot: rot.map(|_| 1 << head_dim.trailing_zeros()),
            v_rot: rot,
            pages: table.pages(),
            pool,
            layer,
            own: None,
        }
    }

    /// A single layer's cache of `n_ctx` positions, alone (kernel checks): a pool of its own,
    /// all its blocks taken, in reverse order so that a kernel that ignored the table would
    /// read the wrong rows.
    pub fn new(
        dev: &CudaDevice,
        format: KvFormat,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
    ) -> Result<Self> {
        Self::with_block(dev, format, n_ctx, n_kv_head, head_dim, 16)
    }

    /// [`Self::new`] in blocks of `block` positions.
    pub fn with_block(
        dev: &CudaDevice,
        format: KvFormat,
        n_ctx: usize,
        n_kv_head: usize,
        head_dim: usize,
        block: usize,
    ) -> Result<Self> {
        let n_blocks = n_ctx.div_ceil(block).max(1);
        let pool = Arc::new(KvPool::new(
            dev, format, 1, n_kv_head, head_dim, block, n_blocks,
        )?);
        let mut table = BlockTable::new(dev, pool.clone(), n_ctx)?;
        // Every block taken, then listed last first.
        table.blocks = pool.lock().take_all();
        table.blocks.reverse();
        table.sync()?;
        let mut cache = Self::view(&table, 0);
        cache.own = Some(table);
        Ok(cache)
    }

    /// The pool's K of this layer, by address.
    pub fn k_addr(&self) -> u64 {
        self.pool.layers[self.layer]
            .0
            .device_ptr(&self.pool.stream)
            .0
    }

    /// The pool's V of this layer, by address.
    pub fn v_addr(&self) -> u64 {
        self.pool.layers[self.layer]
            .1
            .device_ptr(&self.pool.stream)
            .0
    }

    pub fn pages(&self) -> KvPagesArg {
        self.pages
    }

    /// The whole cache of a [`Self::new`] cache, keys and values, as bytes in head-major
    /// order (`[n_kv_head][n_ctx][row]`, as the CPU's `LayerKv`), for checks.
    pub fn read_back(&self, dev: &CudaDevice) -> Result<(Vec<u8>, Vec<u8>)> {
        let table = self.own.as_ref().ok_or_else(|| {
            CudaError::Invalid("read_back: a view of a sequence's cache, not a lone one".into())
        })?;
        let row = self.format.row_bytes(self.head_dim);
        let shift = self.pool.shift;
        let (k, v) = &self.pool.layers[self.layer];
        let mut out = Vec::with_capacity(2);
        for t in [k, v] {
            let pool = dev.download(t)?;
            let mut heads = vec![0u8; self.n_kv_head * self.n_ctx * row];
            for g in 0..self.n_kv_head {
                for p in 0..self.n_ctx {
                    let b = table.blocks[p >> shift] as usize;
                    let at = (((b * self.n_kv_head + g) << shift) | (p & ((1 << shift) - 1))) * row;
                    heads[(g * self.n_ctx + p) * row..][..row].copy_from_slice(&pool[at..][..row]);
                }
            }
            out.push(heads);
        }
        let v = out.pop().expect("two");
        Ok((out.pop().expect("two"), v))
    }
}
