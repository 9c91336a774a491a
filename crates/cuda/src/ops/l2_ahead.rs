//! `kernels/l2_ahead.cu`: weights asked of L2 ahead of the launches that read them, by a
//! kernel on a stream of its own, forked from a captured decode step and joined at its end.
//! The step's router launches count themselves as they start (`MoeRoute::add_norm_route`'s
//! `progress`); the kernel asks for group g of its table once launch g has started.
//!
//! Contract: the same bits (nothing is read into registers). The count only times the
//! requests: a step whose launches count otherwise leaves them early, late or not at all.

use super::int;
use super::launch::{LaunchMode, Launcher};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::L2_AHEAD;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig};
use std::sync::Arc;

/// How the kernel asks (its `form` argument; the plan's `FERROLM_L2_AHEAD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2AheadForm {
    /// `prefetch.global.L2`, a 128-byte line a request.
    Lines,
    /// `cp.async.bulk.prefetch.L2`, 4 KB a request, served by the asking SM's copy engine.
    Bulk,
    /// The waits without the requests: what the branch costs the step by itself (bisecting).
    Dry,
}

/// The kernel's form and its blocks of one warp (the plan's `FERROLM_L2_AHEAD` and
/// `FERROLM_L2_AHEAD_BLOCKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2AheadHow {
    pub form: L2AheadForm,
    pub blocks: u32,
}

/// One step's requests, by group: group g's spans (device address and length in bytes) are
/// asked for once the step's router launch g has started.
pub struct L2AheadTable {
    spans: CudaSlice<u64>,
    group_end: CudaSlice<i32>,
    n_groups: i32,
}

impl L2AheadTable {
    pub fn new(dev: &CudaDevice, groups: &[Vec<(u64, u64)>]) -> Result<Self> {
        let mut spans = Vec::new();
        let mut group_end = Vec::with_capacity(groups.len());
        for g in groups {
            spans.extend(g.iter().flat_map(|&(addr, bytes)| [addr, bytes]));
            group_end.push(int(spans.len() / 2, "l2 ahead spans"));
        }
        let n_groups = int(groups.len(), "l2 ahead groups");
        // Neither buffer is ever empty (the kernel reads no further than n_groups' ends).
        spans.extend([0, 0]);
        group_end.push(0);
        Ok(Self {
            spans: dev.upload(&spans)?,
            group_end: dev.upload(&group_end)?,
            n_groups,
        })
    }

    /// How many router launches a step of this table counts on.
    pub fn groups(&self) -> usize {
        self.n_groups as usize
    }
}

/// A span of a weight's bytes, for [`L2AheadTable::new`].
pub fn span_of<T>(buf: &CudaSlice<T>, stream: &CudaStream) -> (u64, u64) {
    let (addr, _) = buf.device_ptr(stream);
    (addr, (buf.len() * std::mem::size_of::<T>()) as u64)
}

pub struct L2Ahead {
    /// Launches on the side stream, without programmatic dependent launch (nothing runs
    /// before the kernel on its stream).
    launch: Launcher,
    func: CudaFunction,
}

impl L2Ahead {
    pub fn load(dev: &CudaDevice) -> Result<Self> {
        let side = dev
            .context()
            .new_stream()
            .during("creating the L2 prefetch stream")?;
        Ok(Self {
            launch: Launcher::new(side, LaunchMode::default()),
            func: dev.function(&L2_AHEAD, "l2_ahead")?,
        })
    }

    /// The stream the kernel runs on: fork it from the captured stream before
    /// [`Self::launch`], join the captured stream to it before the capture ends.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.launch.stream()
    }

    /// Queues the kernel on [`Self::stream`]. `state` is three u32s, zero when first used:
    /// the router launches' count, its value when the step began, the launch's blocks done.
    pub fn launch(
        &self,
        table: &L2AheadTable,
        state: &mut CudaSlice<u32>,
        how: L2AheadHow,
    ) -> Result<()> {
        assert!(state.len() >= 3, "l2 ahead: a state of three words");
        assert!(how.blocks > 0, "l2 ahead: no blocks");
        let form: i32 = match how.form {
            L2AheadForm::Lines => 1,
            L2AheadForm::Bulk => 2,
            L2AheadForm::Dry => 3,
        };
        let mut b = self.launch.builder(&self.func);
        b.arg(&table.spans)
            .arg(&table.group_end)
            .arg(&table.n_groups)
            .arg(state)
            .arg(&form);
        let cfg = LaunchConfig {
            grid_dim: (how.blocks, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: l2_ahead(spans, group_end, n_groups, state, form): group_end's n_groups
        // ends index the table's spans (made together in L2AheadTable::new), each span a live
        // weight's bytes; state three u32s.
        unsafe { b.launch(cfg) }.during("launching l2_ahead")?;
        Ok(())
    }
}
