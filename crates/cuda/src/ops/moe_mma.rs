//! `kernels/moe_mma.cu`: the grouped GEMM's gate/up and down products for few pairs an expert
//! (a batched decode step), on the tensor-core mat-vec: each warp loads 16 rows of its
//! expert's weights into MMA fragments and multiplies them with all the expert's pairs. It
//! reads and writes what the GEMM kernels do ([`MoeGemm`](super::MoeGemm) runs the index,
//! quantizations and combine around it), with the same bits as the grouped GEMM in
//! [`MmqOrder::Subs`](super::MmqOrder::Subs), its only order.

use super::launch::Launcher;
use super::{int, MoeExperts};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MOE_MMA;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Warps a block (the kernel's MOE_MMA_WARPS), 16 weight rows each.
const WARPS: u32 = 4;
/// Column tiles of 8 pairs the kernel has entries for (`_t1`, `_t2`, `_t4`).
pub const MOE_MMA_TILES: [usize; 3] = [1, 2, 4];

/// What one launch reads and writes besides the weights: the Q8_1 (or Q8_K) activations by
/// token (gate/up) or by sorted position (down), the expert-sorted index, and the output.
pub struct MoeMmaIo<'a> {
    pub acts: &'a CudaSlice<u8>,
    pub sorted: &'a CudaSlice<i32>,
    pub index: &'a CudaSlice<i32>,
    /// Each pair's routing weight (down only).
    pub weights: Option<&'a CudaSlice<f32>>,
    pub out: &'a mut CudaSlice<f32>,
}

pub struct MoeMma {
    launch: Launcher,
    /// (type, column tiles) -> (`moe_mma_gate_up_<type>_t<NT>`, `moe_mma_down_<type>_t<NT>`).
    fns: HashMap<(GgmlType, usize), (CudaFunction, CudaFunction)>,
}

impl MoeMma {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let mut fns = HashMap::new();
        for ty in super::formats::with(|f| f.matvec_mma) {
            let name = super::kernel_suffix(ty);
            for nt in MOE_MMA_TILES {
                let gate_up = dev.function(&MOE_MMA, &format!("moe_mma_gate_up_{name}_t{nt}"))?;
                let down = dev.function(&MOE_MMA, &format!("moe_mma_down_{name}_t{nt}"))?;
                fns.insert((ty, nt), (gate_up, down));
            }
        }
        Ok(Self {
            launch: launch.clone(),
            fns,
        })
    }

    fn entry(&self, ty: GgmlType, tiles: usize, down: bool) -> Result<&CudaFunction> {
        let (g, d) = self.fns.get(&(ty, tiles)).ok_or_else(|| {
            CudaError::Invalid(format!(
                "moe_mma: no kernel for {ty} experts with {tiles} column tiles"
            ))
        })?;
        Ok(if down { d } else { g })
    }

    /// `h[q] = act(gate_e · x[token(q)], up_e · x[token(q)])` for every sorted pair q, `io.acts`
    /// holding the tokens' quantized rows of `n_embd`, `io.out` the pairs' rows of `n_ff`.
    pub fn gate_up(&self, tiles: usize, x: &MoeExperts, io: MoeMmaIo<'_>) -> Result<()> {
        let f = self.entry(x.gate.ty, tiles, false)?;
        check(x, &io, self.launch.stream())?;
        let ep = x.epilogue;
        let (alpha, limit) = ep.act_args();
        let (d, ff) = (int(x.n_embd(), "n_embd"), int(x.n_ff, "n_ff"));
        let (e, k) = (int(x.n_expert, "experts"), int(x.n_used, "experts used"));
        let mut b = self.launch.builder(f);
        b.arg(&x.gate.data)
            .arg(&x.up.data)
            .arg(io.acts)
            .arg(io.sorted)
            .arg(io.index)
            .arg(io.out)
            .arg(&d)
            .arg(&ff)
            .arg(&e)
            .arg(&k)
            .arg(ep.bias(0))
            .arg(ep.bias(1))
            .arg(&alpha)
            .arg(&limit);
        // SAFETY: moe_mma_gate_up_<type>_t<NT>(gate, up, xq, sorted, index, h, n_embd, n_ff, E,
        // k, gate_bias, up_bias, alpha, limit): MoeGemm checked the shapes and sized xq (the
        // tokens' rows), sorted and h (pairs × n_ff) for this batch; index holds the offsets of
        // E experts, and a block writes only sorted positions of its expert.
        unsafe { b.launch(cfg(x.n_ff, x.n_expert)) }
            .during(format!("launching moe_mma_gate_up for {}", x.gate.ty))?;
        Ok(())
    }

    /// `y[p] = weights[p] · (down_e · h[q])` for every sorted pair q (pair id p = sorted[q]),
    /// `io.acts` holding h's quantized rows of `n_ff` in sorted order, `io.out` the pairs' rows
    /// of `n_embd` by pair id.
    pub fn down(&self, tiles: usize, x: &MoeExperts, io: MoeMmaIo<'_>) -> Result<()> {
        let f = self.entry(x.down.ty, tiles, true)?;
        check(x, &io, self.launch.stream())?;
        let weights = io
            .weights
            .ok_or_else(|| CudaError::Invalid("moe_mma down without routing weights".into()))?;
        let (d, ff) = (int(x.n_embd(), "n_embd"), int(x.n_ff, "n_ff"));
        let e = int(x.n_expert, "experts");
        let mut b = self.launch.builder(f);
        b.arg(&x.down.data)
            .arg(io.acts)
            .arg(io.sorted)
            .arg(io.index)
            .arg(weights)
            .arg(io.out)
            .arg(&ff)
            .arg(&d)
            .arg(&e)
            .arg(x.epilogue.bias(2));
        // SAFETY: moe_mma_down_<type>_t<NT>(down, hq, sorted, index, weights, y, n_ff, n_embd,
        // E, down_bias): hq holds the sorted pairs' rows, y pairs × n_embd floats written at
        // pair ids; shapes as for gate_up.
        unsafe { b.launch(cfg(x.n_embd(), x.n_expert)) }
            .during(format!("launching moe_mma_down for {}", x.down.ty))?;
        Ok(())
    }
}

/// Widths of whole super-blocks (the plan's [`MmvqMma::supports`](super::MmvqMma::supports))
/// and 8-byte aligned activation rows: the kernel loads a lane's odd-block codes 8 bytes at a
/// time.
fn check(x: &MoeExperts, io: &MoeMmaIo<'_>, stream: &cudarc::driver::CudaStream) -> Result<()> {
    let whole = |ty, cols| super::MmvqMma::supports(ty, cols);
    if !whole(x.gate.ty, x.n_embd()) || !whole(x.down.ty, x.n_ff) || x.gate.ty != x.up.ty {
        return Err(CudaError::Invalid(format!(
            "moe_mma: {}/{} gate/up and {} down of {} → {} have no tensor-core mat-vec",
            x.gate.ty,
            x.up.ty,
            x.down.ty,
            x.n_embd(),
            x.n_ff
        )));
    }
    if io.acts.device_ptr(stream).0 % 8 != 0 {
        return Err(CudaError::Invalid(
            "moe_mma: activations not 8-byte aligned".into(),
        ));
    }
    Ok(())
}

/// Block (32, WARPS); grid (row blocks, experts).
fn cfg(rows: usize, n_expert: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            rows.div_ceil(16 * WARPS as usize) as u32,
            n_expert as u32,
            1,
        ),
        block_dim: (32, WARPS, 1),
        shared_mem_bytes: 0,
    }
}
