//! `kernels/attention_rows.cu`: decode attention for every sequence of a pass in one launch
//! per layer, and their keys and values stored in one launch, each row reading and writing its
//! own sequence's cache through a per-row table ([`RowsTable`]) instead of a launch per
//! sequence over rows copied out and back.
//!
//! Contract: the same formula as `Attention::decode` (flash-decoding, f32 softmax and sums)
//! in another f32 summation order, so within `cuda-parity`'s f32 attention bound of the
//! per-sequence kernels and of the CPU: each row runs the decode by KV group's block
//! (`attention_group.cuh`, or `attention_tc.cuh`'s on the tensor cores) on its own cache and
//! partials. A row's bits depend only on its own query, its sequence's cache and its split
//! count, which the caller derives from the row's own key count
//! ([`crate::plan::Plan::rows_splits`]): never on the other rows of the batch. f16 caches,
//! every head size of [`ATTN_HEAD_DIMS`], up to 8 query heads a KV head.
//!
//! The table holds device addresses (each layer's K and V pools, the row's block table, its
//! decode partials) and is rewritten in place, so a captured graph replays over other
//! sequences' caches.

use super::attention::{
    group_smem_bytes_staged, sinks_arg, tc_smem_bytes, window_arg, AttnSoftmax, DecodeWork,
    ATTN_HEAD_DIMS, ATTN_TC_DIMS, ATTN_TC_GROUPS,
};
use super::int;
use super::kv_cache::{KvCache, KvFormat};
use super::launch::Launcher;
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::ATTENTION_ROWS;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};
use std::collections::HashMap;
use std::sync::Arc;

/// Tiles in flight a block (the kernel's ROWS_STAGES).
const ROWS_STAGES: usize = 2;

/// Dynamic shared memory of `attn_decode_rows_d{head_dim}_g{group}`.
fn rows_smem_bytes(head_dim: usize, group: usize) -> usize {
    group_smem_bytes_staged(head_dim, group, ROWS_STAGES)
}

/// Dynamic shared memory of `attn_decode_rows_tc_d{head_dim}_g{group}`.
fn rows_tc_smem_bytes(head_dim: usize, group: usize) -> usize {
    tc_smem_bytes(head_dim, group, ROWS_STAGES)
}

/// Warps per block (attention.cuh's ATTN_NWARPS).
const NWARPS: usize = 4;
/// The most query heads a KV head that the kernel has instances for (1..=8).
pub const ROWS_MAX_GROUP: usize = 8;

/// Where one row of a pass reads and writes: its sequence's layers and that sequence's decode
/// work, at slot `slot` (the row's index among its sequence's rows), split `n_split` ways (at
/// most the work's splits).
pub struct RowSeq<'a> {
    pub layers: &'a [KvCache],
    pub work: &'a DecodeWork,
    pub slot: usize,
    pub n_split: usize,
}

/// The per-row table of a pass on the device (the layout in `attention_rows.cu`'s header):
/// every layer's K and V address per row, the row's block table and partials, its block shift
/// and its split count (0: a row the launch does not serve).
pub struct RowsTable {
    /// `[n_layer][2][n_rows]`.
    kv: CudaSlice<u64>,
    /// `[4][n_rows]`: partial m, l, acc and the split counters, at the row's slot.
    work: CudaSlice<u64>,
    /// `[n_rows]`: the row's sequence's block table.
    pages: CudaSlice<u64>,
    /// `[2][n_rows]`: block shift, n_split.
    meta: CudaSlice<i32>,
    pub n_rows: usize,
    pub n_layer: usize,
    /// The grid's splits: at least every served row's split count (fixed, so that a captured
    /// launch serves later contents).
    pub grid_split: usize,
    /// Whether any row is served.
    pub serves_any: bool,
}

fn addr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    s.device_ptr(stream).0
}

impl RowsTable {
    /// An empty table (no row served) for `n_rows` rows of `n_layer` layers, launching
    /// `grid_split` splits.
    pub fn new(dev: &CudaDevice, n_layer: usize, n_rows: usize, grid_split: usize) -> Result<Self> {
        assert!(
            n_rows > 0 && n_layer > 0 && grid_split > 0,
            "rows table: empty"
        );
        Ok(Self {
            kv: dev.zeros(n_layer * 2 * n_rows)?,
            work: dev.zeros(4 * n_rows)?,
            pages: dev.zeros(n_rows)?,
            meta: dev.zeros(2 * n_rows)?,
            n_rows,
            n_layer,
            grid_split,
            serves_any: false,
        })
    }

    /// Rewrites the table: row `t` served as `rows[t]` says, or not at all for `None`. Every
    /// served row's cache is f16 with `n_layer` layers, and its work has room for its slot;
    /// its split count must fit the grid.
    pub fn write(&mut self, stream: &Arc<CudaStream>, rows: &[Option<RowSeq<'_>>]) -> Result<()> {
        let n = self.n_rows;
        if rows.len() != n {
            return Err(CudaError::Invalid(format!(
                "rows table of {n} rows written with {}",
                rows.len()
            )));
        }
        let (mut kv, mut work, mut pages, mut meta) = (
            vec![0u64; self.n_layer * 2 * n],
            vec![0u64; 4 * n],
            vec![0u64; n],
            vec![0i32; 2 * n],
        );
        let mut any = false;
        for (t, row) in rows.iter().enumerate() {
            let Some(r) = row else { continue };
            let w = r.work;
            let bad = r.layers.len() != self.n_layer
                || r.slot >= w.max_q
                || r.n_split == 0
                || r.n_split > w.n_split.min(self.grid_split)
                || r.layers.iter().any(|l| l.format != KvFormat::F16);
            if bad {
                return Err(CudaError::Invalid(format!(
                    "rows table: row {t} has a cache of {} layers, slot {} of {}, {} splits \
                     (its work {}, the grid {}), or a cache that is not f16",
                    r.layers.len(),
                    r.slot,
                    w.max_q,
                    r.n_split,
                    w.n_split,
                    self.grid_split
                )));
            }
            for (i, l) in r.layers.iter().enumerate() {
                kv[i * 2 * n + t] = l.k_addr();
                kv[i * 2 * n + n + t] = l.v_addr();
            }
            // The slot's partials: [n_head][n_split] floats (the row uses the first
            // n_head * r.n_split), their acc rows, n_head counters.
            let parts = w.n_head * w.n_split;
            work[t] = addr(&w.m, stream) + (r.slot * parts * 4) as u64;
            work[n + t] = addr(&w.l, stream) + (r.slot * parts * 4) as u64;
            work[2 * n + t] = addr(&w.acc, stream) + (r.slot * parts * w.head_dim * 4) as u64;
            work[3 * n + t] = addr(&w.done, stream) + (r.slot * w.n_head * 4) as u64;
            let pg = r.layers[0].pages();
            pages[t] = pg.blocks_addr();
            meta[t] = pg.shift();
            meta[n + t] = int(r.n_split, "n_split");
            any = true;
        }
        stream
            .memcpy_htod(&kv, &mut self.kv)
            .during("copying the rows table")?;
        stream
            .memcpy_htod(&work, &mut self.work)
            .during("copying the rows table")?;
        stream
            .memcpy_htod(&pages, &mut self.pages)
            .during("copying the rows table")?;
        stream
            .memcpy_htod(&meta, &mut self.meta)
            .during("copying the rows table")?;
        self.serves_any = any;
        Ok(())
    }
}

pub struct AttentionRows {
    launch: Launcher,
    store: CudaFunction,
    /// Per entry of ATTN_HEAD_DIMS, then per group size 1..=ROWS_MAX_GROUP.
    decode: Vec<Vec<CudaFunction>>,
    /// (head size, group) of ATTN_TC_DIMS × ATTN_TC_GROUPS -> `attn_decode_rows_tc_*`.
    decode_tc: HashMap<(usize, usize), CudaFunction>,
}

impl AttentionRows {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let f = |name: String| dev.function(&ATTENTION_ROWS, &name);
        Ok(Self {
            launch: launch.clone(),
            store: f("kv_store_rows_f16".into())?,
            decode: ATTN_HEAD_DIMS
                .iter()
                .map(|d| {
                    (1..=ROWS_MAX_GROUP)
                        .map(|g| {
                            let name = format!("attn_decode_rows_d{d}_g{g}");
                            dev.function_with_smem(&ATTENTION_ROWS, &name, rows_smem_bytes(*d, g))
                        })
                        .collect::<Result<_>>()
                })
                .collect::<Result<_>>()?,
            decode_tc: ATTN_TC_DIMS
                .iter()
                .flat_map(|&d| ATTN_TC_GROUPS.iter().map(move |&g| (d, g)))
                .map(|(d, g)| {
                    let name = format!("attn_decode_rows_tc_d{d}_g{g}");
                    let smem = rows_tc_smem_bytes(d, g);
                    Ok((
                        (d, g),
                        dev.function_with_smem(&ATTENTION_ROWS, &name, smem)?,
                    ))
                })
                .collect::<Result<_>>()?,
        })
    }

    /// Whether one launch can serve a model of these heads (else the per-sequence path).
    pub fn supports(n_head: usize, n_kv_head: usize, head_dim: usize) -> bool {
        n_kv_head > 0
            && n_head.is_multiple_of(n_kv_head)
            && (1..=ROWS_MAX_GROUP).contains(&(n_head / n_kv_head))
            && ATTN_HEAD_DIMS.contains(&head_dim)
    }

    /// Stores every served row's k and v (`[n_rows][n_kv_head * head_dim]` f32) in layer
    /// `layer` (of the table) of its cache, at the row's position.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &self,
        table: &RowsTable,
        layer: usize,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        positions: &CudaSlice<u32>,
        n_kv_head: usize,
        head_dim: usize,
    ) -> Result<()> {
        let n = table.n_rows;
        assert!(layer < table.n_layer, "rows store: layer out of the table");
        assert!(
            k.len() >= n * n_kv_head * head_dim && v.len() == k.len() && positions.len() >= n,
            "rows store: shapes"
        );
        let kv = table.kv.slice(layer * 2 * n..(layer + 1) * 2 * n);
        let (nr, nkv, hd) = (
            int(n, "rows"),
            int(n_kv_head, "n_kv_head"),
            int(head_dim, "head_dim"),
        );
        let mut b = self.launch.builder(&self.store);
        b.arg(k)
            .arg(v)
            .arg(&kv)
            .arg(&table.meta)
            .arg(&table.pages)
            .arg(positions)
            .arg(&nr)
            .arg(&nkv)
            .arg(&hd);
        let cfg = LaunchConfig {
            grid_dim: (super::stride_blocks(n * n_kv_head * head_dim, 256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: kv_store_rows_f16(k, v, kv, meta, pages, pos, n_rows, n_kv_head, head_dim):
        // n_rows rows in; the table's rows address f16 pools of this head shape and their
        // sequences' block tables (RowsTable::write checked their format; blocks for the rows'
        // positions are the caller's, as for every store).
        unsafe { b.launch(cfg) }.during("launching kv_store_rows_f16")?;
        Ok(())
    }

    /// Decode attention of every served row over its own cache's layer `layer`: `out[t] =
    /// softmax(q[t] · K[first..=pos[t]]ᵀ · scale) · V` per head, `first` the window's first key
    /// (0 without one; `sm` as `Attention::decode` takes it); rows not served get zeros.
    /// `tensor_cores`: the tensor-core kernels (`attn_decode_rows_tc_*`), where the shape has
    /// them ([`DecodeKernel::has_tensor_cores`](super::DecodeKernel::has_tensor_cores)).
    #[allow(clippy::too_many_arguments)]
    pub fn decode(
        &self,
        tensor_cores: bool,
        table: &RowsTable,
        layer: usize,
        q: &CudaSlice<f32>,
        positions: &CudaSlice<u32>,
        n_head: usize,
        n_kv_head: usize,
        head_dim: usize,
        sm: AttnSoftmax<'_>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = table.n_rows;
        let win = window_arg(sm.window)?;
        if !Self::supports(n_head, n_kv_head, head_dim) {
            return Err(CudaError::Invalid(format!(
                "batched decode attention: no kernel for {n_head} heads over {n_kv_head}, \
                 head size {head_dim}"
            )));
        }
        assert!(layer < table.n_layer, "rows decode: layer out of the table");
        let width = n * n_head * head_dim;
        assert!(
            q.len() >= width && out.len() >= width && positions.len() >= n,
            "rows decode: shapes"
        );
        let group = n_head / n_kv_head;
        let (f, smem) = if tensor_cores {
            let f = self.decode_tc.get(&(head_dim, group)).ok_or_else(|| {
                CudaError::Invalid(format!(
                    "batched decode attention on the tensor cores: no kernel for {group} heads \
                     a group of {head_dim}"
                ))
            })?;
            (f, rows_tc_smem_bytes(head_dim, group))
        } else {
            let di = ATTN_HEAD_DIMS
                .iter()
                .position(|&d| d == head_dim)
                .expect("supported");
            (
                &self.decode[di][group - 1],
                rows_smem_bytes(head_dim, group),
            )
        };
        let kv = table.kv.slice(layer * 2 * n..(layer + 1) * 2 * n);
        let nh = int(n_head, "n_head");
        let scale = sm.scale;
        let sinks = sinks_arg(&sm, n_head);
        let mut b = self.launch.builder(f);
        b.arg(q)
            .arg(&kv)
            .arg(&table.meta)
            .arg(&table.pages)
            .arg(&table.work)
            .arg(positions)
            .arg(out)
            .arg(&nh)
            .arg(&scale)
            .arg(&win)
            .arg(sinks);
        let cfg = LaunchConfig {
            grid_dim: (table.grid_split as u32, n_kv_head as u32, n as u32),
            block_dim: ((NWARPS * 32) as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // SAFETY: attn_decode_rows[_tc]_dD_gG(q, kv, meta, pages, work, pos, out, n_head, scale,
        // window, sinks) (sinks null or n_head floats) with G = n_head / n_kv_head and the
        // dynamic shared memory its load raised the limit to: n_rows rows of q and out; each
        // served row's caches (f16, D per row, 16-byte aligned allocations) and partials (its
        // slot of a DecodeWork of at least its split count, which the grid covers) were checked
        // by RowsTable::write; blocks for each row's positions are the caller's.
        unsafe { b.launch(cfg) }.during("launching attn_decode_rows")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instance the launcher loads exists in the kernel file.
    #[test]
    fn every_group_has_its_kernel() {
        let src = ATTENTION_ROWS.source;
        let header = crate::kernels::HEADERS
            .iter()
            .find(|h| h.name == "attention.cuh")
            .expect("attention.cuh");
        assert!(header
            .source
            .contains(&format!("#define ATTN_NWARPS {NWARPS}")));
        for d in ATTN_HEAD_DIMS {
            assert!(src.contains(&format!("ROWS_INSTANCES({d})")));
        }
        assert!(src.contains(&format!("#define ROWS_STAGES {ROWS_STAGES}")));
        // Two stages of 32-wide heads hold less than eight heads' combine scratch: the layout
        // takes the larger.
        assert_eq!(rows_smem_bytes(32, 8), (512 + 8 + 8 * 256) * 4);
        assert_eq!(
            rows_smem_bytes(128, 4),
            2 * 2 * 32 * 128 * 2 + 4 * 128 * 4 + 4 * 32 * 4
        );
        // attention_tc.cuh's TcLayout over two stages: tiles, q's terms, the scores (9 floats
        // a key), P's terms, the factors and the prescale.
        let tc = crate::kernels::HEADERS
            .iter()
            .find(|h| h.name == "attention_tc.cuh")
            .expect("attention_tc.cuh");
        assert!(
            tc.source.contains("S_STRIDE = 9;") && tc.source.contains("P_STRIDE = TC_TILE + 8;")
        );
        assert_eq!(
            rows_tc_smem_bytes(128, 4),
            2 * 2 * 32 * 128 * 2 + 2 * 8 * 136 * 2 + 2 * 32 * 9 * 4 + 2 * 8 * 40 * 2 + 48
        );
        for g in 1..=ROWS_MAX_GROUP {
            assert!(src.contains(&format!("ROWS_INSTANCE(D, {g})")));
        }
        assert!(AttentionRows::supports(9, 3, 64));
        assert!(AttentionRows::supports(8, 8, 80));
        assert!(AttentionRows::supports(8, 1, 256));
        assert!(!AttentionRows::supports(64, 4, 128)); // 16 a group
        assert!(!AttentionRows::supports(8, 8, 48));
    }
}
