//! `kernels/moe_decode.cu`: the routed experts of 1..=8 tokens, added into the residual:
//! `out[t] += Σ_j w[t][j] · down_e(silu(gate_e · x[t]) * (up_e · x[t]))`, `e = ids[t][j]`.
//!
//! Fused (the default): one launch for gate, up and SwiGLU of every slot, one quantize of `h`
//! to Q8_1, one launch for down with the weighted slot-order sum into the residual. A token
//! sharing an expert with another reuses the leader slot's weight reads (a mat-mat over the
//! expert's members). The per-slot path (`FERROLM_MOE_FUSED=0`): a gate, an up and a down
//! mat-vec launch per slot, then swiglu, quantize and combine launches; both read the ids from
//! device memory, and the two paths agree bit for bit (every dot is the same warp walk). Which
//! path, and the wide or narrow walk for Q4_K, Q6_K and MXFP4, is the caller's ([`ExpertMatVec`]).
//!
//! Nothing here allocates or waits on the host: scratch lives in [`MoeDecodeWork`], and a
//! captured graph replays with new ids and weights.

use super::launch::Launcher;
use super::mmvq::stage_args;
use super::{int, stride_blocks, ActQuant, MoeExperts, Quantize};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::{ELEMENTWISE, MOE_DECODE};
use crate::plan::ExpertMatVec;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use ferrolm_gguf::GgmlType;
use ferrolm_quant::QK_K;
use std::collections::HashMap;

/// Most tokens one call takes (the kernels' NTOK instances).
pub const MOE_DECODE_MAX_TOKENS: usize = 8;
/// Most slots (tokens × experts a token) one call takes (the kernel's MOE_MAX_SLOTS).
const MAX_SLOTS: usize = 128;
/// Warps per block (the kernel's MOE_NWARPS; the gate/up kernel's most).
pub(crate) const MOE_DECODE_WARPS: u32 = 8;

/// MXFP4 at one token takes half the rows in more blocks an SM (the kernel's MOE_LEAN), and so
/// do the K-quants' `lean_` entries where the plan asks (FERROLM_MOE_LEAN; wide walks).
fn lean(how: &ExpertMatVec, ty: GgmlType, n: usize) -> bool {
    n == 1 && (ty == GgmlType::Mxfp4 || (how.lean && how.wide && has_lean(ty)))
}

/// Formats with `moe_{gate_up,down}_lean_<type>_n1` entries.
fn has_lean(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K)
}

/// Formats with `moe_{gate_up,down}_tight_<type>_n1` entries too (the lean shape in four blocks
/// an SM: FERROLM_MOE_TIGHT).
fn has_tight(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q6K)
}

/// Rows of gate (and of up) a warp takes for `n` tokens (the kernel's MOE_GATE_ROWS_AS).
fn gate_rows(lean: bool, n: usize) -> usize {
    if lean {
        2
    } else if n <= 2 {
        4
    } else {
        1
    }
}

/// Output rows a down block takes for `n` tokens (the kernel's MOE_DOWN_ROWS_AS).
fn down_rows(lean: bool, n: usize) -> usize {
    if lean {
        4
    } else if n <= 2 {
        8
    } else {
        2
    }
}

/// Scratch for up to `max_n` tokens of one expert shape, allocated once.
pub struct MoeDecodeWork {
    /// `[slot][n_ff]`: SwiGLU output (the per-slot path's gate product first).
    h: CudaSlice<f32>,
    /// `[slot][n_ff]`: the per-slot path's up product.
    up: CudaSlice<f32>,
    /// `h` as Q8_1, the down product's activations.
    hq: CudaSlice<u8>,
    /// `[slot][n_embd]`: the per-slot path's down products before the combine.
    down: CudaSlice<f32>,
    /// `[slot][n_ff / 256]`: blocks of the gate/up launch done with each 256-row group of h,
    /// where that launch quantizes h (zero between launches).
    hq_done: CudaSlice<u32>,
    pub max_n: usize,
    pub n_used: usize,
    pub n_ff: usize,
    pub n_embd: usize,
}

impl MoeDecodeWork {
    pub fn new(dev: &CudaDevice, max_n: usize, experts: &MoeExperts) -> Result<Self> {
        let (k, ff, d) = (experts.n_used, experts.n_ff, experts.n_embd());
        check_work(max_n, k, ff)?;
        let slots = max_n * k;
        Ok(Self {
            h: dev.zeros(slots * ff)?,
            up: dev.zeros(slots * ff)?,
            hq: dev.zeros(Quantize::q8_1_bytes(slots, ff))?,
            down: dev.zeros(slots * d)?,
            hq_done: dev.zeros((slots * ff.div_ceil(QK_K)).max(1))?,
            max_n,
            n_used: k,
            n_ff: ff,
            n_embd: d,
        })
    }

    /// Whether the decode kernels take `k` experts a token of width `n_ff` at their full
    /// token count (else the caller takes the grouped GEMM).
    pub fn supports(k: usize, n_ff: usize) -> bool {
        check_work(MOE_DECODE_MAX_TOKENS, k, n_ff).is_ok()
    }

    /// The last call's SwiGLU output, `[n*k][n_ff]` (for parity checks).
    pub fn h(&self) -> &CudaSlice<f32> {
        &self.h
    }

    /// The last call's `h` as Q8_1, the down product's activations (for parity checks).
    pub fn h_q8_1(&self) -> &CudaSlice<u8> {
        &self.hq
    }
}

/// Formats whose kernels walk wide by default and have `narrow_` entry points too
/// (`experts_narrow` of [`formats`](super::formats)).
fn has_narrow(ty: GgmlType) -> bool {
    super::formats::has(ty, |f| f.experts_narrow)
}

pub struct MoeDecode {
    launch: Launcher,
    quantize: Quantize,
    /// (type, tokens, narrow) -> `moe_gate_up_[narrow_]<type>_n<tokens>` /
    /// `moe_down_[narrow_]<type>_n<tokens>`.
    gate_up: HashMap<(GgmlType, usize, bool), CudaFunction>,
    down: HashMap<(GgmlType, usize, bool), CudaFunction>,
    /// (type, tight) -> `moe_gate_up_{lean,tight}_<type>_n1` / `moe_down_{lean,tight}_<type>_n1`
    /// (FERROLM_MOE_LEAN, FERROLM_MOE_TIGHT).
    gate_up_lean: HashMap<(GgmlType, bool), CudaFunction>,
    down_lean: HashMap<(GgmlType, bool), CudaFunction>,
    /// (type, narrow) -> `moe_slot_matvec_[narrow_]<type>`.
    slot_matvec: HashMap<(GgmlType, bool), CudaFunction>,
    combine: CudaFunction,
    swiglu: CudaFunction,
    swiglu_oai: CudaFunction,
}

impl MoeDecode {
    /// Loads the kernels, the narrow walks of Q4_K and Q6_K too.
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let (mut gate_up, mut down, mut slot_matvec) =
            (HashMap::new(), HashMap::new(), HashMap::new());
        let (mut gate_up_lean, mut down_lean) = (HashMap::new(), HashMap::new());
        // Entry points `moe_*_<suffix>[_n<tokens>]` of the formats with expert kernels.
        for ty in super::formats::with(|f| f.experts) {
            let suffix = super::kernel_suffix(ty);
            for narrow in [false, true] {
                if narrow && !has_narrow(ty) {
                    continue;
                }
                let name = if narrow {
                    format!("narrow_{suffix}")
                } else {
                    suffix.clone()
                };
                for n in 1..=MOE_DECODE_MAX_TOKENS {
                    let f = |op: &str| dev.function(&MOE_DECODE, &format!("moe_{op}_{name}_n{n}"));
                    gate_up.insert((ty, n, narrow), f("gate_up")?);
                    down.insert((ty, n, narrow), f("down")?);
                }
                let f = dev.function(&MOE_DECODE, &format!("moe_slot_matvec_{name}"))?;
                slot_matvec.insert((ty, narrow), f);
            }
            for tight in [false, true] {
                if !(if tight { has_tight(ty) } else { has_lean(ty) }) {
                    continue;
                }
                let shape = if tight { "tight" } else { "lean" };
                let f =
                    |op: &str| dev.function(&MOE_DECODE, &format!("moe_{op}_{shape}_{suffix}_n1"));
                gate_up_lean.insert((ty, tight), f("gate_up")?);
                down_lean.insert((ty, tight), f("down")?);
            }
        }
        Ok(Self {
            launch: launch.clone(),
            quantize: Quantize::load(dev, launch)?,
            gate_up,
            down,
            gate_up_lean,
            down_lean,
            slot_matvec,
            combine: dev.function(&MOE_DECODE, "moe_combine")?,
            swiglu: dev.function(&ELEMENTWISE, "swiglu_f32")?,
            swiglu_oai: dev.function(&ELEMENTWISE, "swiglu_oai_f32")?,
        })
    }

    pub fn supports(ty: GgmlType) -> bool {
        super::formats::has(ty, |f| f.experts)
    }

    /// The stream the kernels are queued on (`moe_slices` copies on it too).
    pub(super) fn stream(&self) -> &std::sync::Arc<cudarc::driver::CudaStream> {
        self.launch.stream()
    }

    /// Adds the experts' output for the `n` (1..=8) Q8_1 rows of `x_q8_1` (`n_embd` each) to
    /// `residual` (`n` rows of `n_embd`), the experts `ids[t*k + j]` weighted by
    /// `weights[t*k + j]` (as [`MoeRoute::route`](super::MoeRoute::route) leaves them). An id
    /// outside `0..n_expert` contributes nothing. `how` (the plan's) picks the fused kernels
    /// (gate and up of one format) or the per-slot path, the walk, and `h`'s quantization.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        how: &ExpertMatVec,
        x_q8_1: &CudaSlice<u8>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeDecodeWork,
        residual: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.run(how, x_q8_1, n, ids, weights, experts, work, residual, false)
    }

    /// [`Self::forward`] into `out` as it would add into zeros, bit for bit, whatever `out`
    /// held: the fused kernels write their sums over it (no clearing launch before them), the
    /// per-slot path clears it first.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_over(
        &self,
        how: &ExpertMatVec,
        x_q8_1: &CudaSlice<u8>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeDecodeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.run(how, x_q8_1, n, ids, weights, experts, work, out, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        how: &ExpertMatVec,
        x_q8_1: &CudaSlice<u8>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeDecodeWork,
        residual: &mut CudaSlice<f32>,
        overwrite: bool,
    ) -> Result<()> {
        experts.check();
        let (k, ff, d) = (experts.n_used, experts.n_ff, experts.n_embd());
        assert!(
            (work.n_used, work.n_ff, work.n_embd) == (k, ff, d),
            "moe decode: work for another expert shape"
        );
        assert!(
            (1..=work.max_n).contains(&n),
            "moe decode: {n} tokens, work for 1..={}",
            work.max_n
        );
        assert!(
            x_q8_1.len() >= Quantize::q8_1_bytes(n, d),
            "moe decode: x too small"
        );
        assert!(
            ids.len() >= n * k && weights.len() >= n * k,
            "moe decode: routes too small"
        );
        assert!(residual.len() >= n * d, "moe decode: residual too small");
        for m in [experts.gate, experts.up, experts.down] {
            if !Self::supports(m.ty) {
                return Err(CudaError::Invalid(format!(
                    "moe decode: no kernel for {} expert weights",
                    m.ty
                )));
            }
        }
        if how.fused {
            if experts.gate.ty != experts.up.ty {
                return Err(CudaError::Invalid(format!(
                    "moe decode: fused kernels for gate {} and up {}",
                    experts.gate.ty, experts.up.ty
                )));
            }
            let over = i32::from(overwrite);
            self.fused_forward(how, x_q8_1, n, ids, weights, experts, work, residual, over)
        } else {
            if overwrite {
                self.stream()
                    .memset_zeros(residual)
                    .during("clearing the MoE output")?;
            }
            self.per_slot_forward(how, x_q8_1, n, ids, weights, experts, work, residual)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn fused_forward(
        &self,
        how: &ExpertMatVec,
        x_q8_1: &CudaSlice<u8>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        e: &MoeExperts,
        work: &mut MoeDecodeWork,
        residual: &mut CudaSlice<f32>,
        overwrite: i32,
    ) -> Result<()> {
        let (k, ff, d) = (e.n_used, e.n_ff, e.n_embd());
        let ints = Ints::new(d, ff, e.n_expert, k);
        let block = (32, MOE_DECODE_WARPS, 1);
        let tight = how.tight_gate_up;
        let (gate_up, lean_gate) =
            pick(&self.gate_up, &self.gate_up_lean, how, tight, e.gate.ty, n);
        let mode = self.launch.mode();
        let (stage, smem) = stage_args(mode, walks_wide(how, e.gate.ty), n * d / 32);
        let walk = walk_bits(how, stage);
        let warps = how.gate_up_warps;
        if !(1..=MOE_DECODE_WARPS).contains(&warps) {
            return Err(CudaError::Invalid(format!(
                "moe decode: {warps} warps a gate/up block, want 1 to {MOE_DECODE_WARPS}"
            )));
        }
        let cfg = LaunchConfig {
            grid_dim: (
                ff.div_ceil(warps as usize * gate_rows(lean_gate, n)) as u32,
                (n * k) as u32,
                1,
            ),
            block_dim: (32, warps, 1),
            shared_mem_bytes: smem,
        };
        let (alpha, limit) = e.epilogue.act_args();
        // The down weights' share a block asks L2 for: whole 16-byte pieces only.
        let down_bytes = e.down.data.len() / e.n_expert.max(1);
        let prefetch = how.down_prefetch
            && e.down.data.len() == down_bytes * e.n_expert
            && down_bytes.is_multiple_of(16);
        let down_l2 = prefetch.then_some(&e.down.data);
        let down_bytes = down_bytes as i64;
        // h quantized by this launch's last blocks, where its blocks tile 256-row groups.
        let h_in_gate_up = how.h_in_gate_up
            && n == 1
            && ff.is_multiple_of(QK_K)
            && QK_K.is_multiple_of(warps as usize * gate_rows(lean_gate, n));
        let hq_k = i32::from(how.h_quant == ActQuant::Q8K);
        let mut b = self.launch.builder(gate_up);
        b.arg(&e.gate.data).arg(&e.up.data).arg(x_q8_1).arg(ids);
        b.arg(&mut work.h)
            .arg(&ints.d)
            .arg(&ints.ff)
            .arg(&ints.ne)
            .arg(&ints.k)
            .arg(&walk);
        b.arg(e.epilogue.bias(0))
            .arg(e.epilogue.bias(1))
            .arg(&alpha)
            .arg(&limit)
            .arg(down_l2)
            .arg(&down_bytes);
        let (hq, hq_done) = (&mut work.hq, &mut work.hq_done);
        b.arg(h_in_gate_up.then_some(&*hq))
            .arg(&hq_k)
            .arg(&mut *hq_done);
        // SAFETY: moe_gate_up_*_nN(gate, up, x, ids, h, n_embd, n_ff, n_expert, k, walk,
        // gate_bias, up_bias, alpha, limit, down_l2, down_bytes, hq, hq_k, hq_done): stacked
        // [n_expert*n_ff][n_embd] weights, N Q8_1 rows, N*k ids, N*k x n_ff floats out (work
        // sized for max_n >= N); biases of [n_expert][n_ff] floats or null (MoeExperts::check);
        // the down weights (only prefetched, never read) or null, n_expert experts of
        // down_bytes (a multiple of 16); hq (N*k x n_ff / 32 blocks) or null, its counters
        // (N*k x n_ff / 256, zero between launches), the blocks tiling 256-row groups where hq
        // is given (checked above); a block of `warps` (1..=MOE_DECODE_WARPS, the kernel's
        // launch bound) per warps * gate_rows(N) rows and slot; with stage, the shared bytes of
        // the N rows' staged blocks.
        unsafe { b.launch(cfg) }.during(format!("launching moe gate/up for {}", e.gate.ty))?;

        if !h_in_gate_up {
            self.quantize_h(how, e, n, work)?;
        }

        let tight = how.tight_down && how.down_direct;
        let (down, lean_down) = pick(&self.down, &self.down_lean, how, tight, e.down.ty, n);
        let (stage, smem) = stage_args(mode, walks_wide(how, e.down.ty), n * k * ff / 32);
        let walk = walk_bits(how, stage);
        let cfg = LaunchConfig {
            grid_dim: (d.div_ceil(down_rows(lean_down, n)) as u32, 1, 1),
            block_dim: block,
            shared_mem_bytes: smem,
        };
        let mut b = self.launch.builder(down);
        b.arg(&e.down.data).arg(&work.hq).arg(ids).arg(weights);
        b.arg(residual)
            .arg(&ints.d)
            .arg(&ints.ff)
            .arg(&ints.ne)
            .arg(&ints.k)
            .arg(&walk)
            .arg(e.epilogue.bias(2))
            .arg(&overwrite);
        // SAFETY: moe_down_*_nN(down, hq, ids, weights, out, n_embd, n_ff, n_expert, k,
        // walk, down_bias, overwrite): stacked [n_expert*n_embd][n_ff] weights, N*k Q8_1
        // rows of n_ff, N*k ids and weights, N x n_embd floats updated, a bias of
        // [n_expert][n_embd] floats or null; a block per down_rows(N) output rows; with stage,
        // the shared bytes of the N*k rows' staged blocks.
        unsafe { b.launch(cfg) }.during(format!("launching moe down for {}", e.down.ty))?;
        Ok(())
    }

    /// `h` of `n` tokens' slots as the down projection's activations (its CPU partner format).
    fn quantize_h(
        &self,
        how: &ExpertMatVec,
        e: &MoeExperts,
        n: usize,
        work: &mut MoeDecodeWork,
    ) -> Result<()> {
        let (rows, ff) = (n * e.n_used, e.n_ff);
        self.quantize
            .rows(&work.h, rows, ff, how.h_quant, &mut work.hq)
    }

    /// The bisecting path: the same dots one slot and one matrix a launch.
    #[allow(clippy::too_many_arguments)]
    fn per_slot_forward(
        &self,
        how: &ExpertMatVec,
        x_q8_1: &CudaSlice<u8>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        e: &MoeExperts,
        work: &mut MoeDecodeWork,
        residual: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (k, ff, d) = (e.n_used, e.n_ff, e.n_embd());
        let ne = int(e.n_expert, "moe experts");
        let ep = &e.epilogue;
        for s in 0..n * k {
            let t = s / k;
            self.slot_matvec(how, e.gate, ep.bias(0), x_q8_1, ids, &mut work.h, s, t, ne)?;
            self.slot_matvec(how, e.up, ep.bias(1), x_q8_1, ids, &mut work.up, s, t, ne)?;
        }
        let len = int(n * k * ff, "moe h");
        let threads = 256;
        let cfg = LaunchConfig {
            grid_dim: (stride_blocks(n * k * ff, threads), 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        match ep.swiglu_oai {
            None => {
                let null = 0u64;
                let mut b = self.launch.builder(&self.swiglu);
                b.arg(&mut work.h).arg(&work.up).arg(&len).arg(&null);
                // SAFETY: swiglu_f32(gate, up, n, null): n floats each, gate updated in place,
                // no f16 copy.
                unsafe { b.launch(cfg) }.during("launching moe swiglu")?;
            }
            Some((alpha, limit)) => {
                let mut b = self.launch.builder(&self.swiglu_oai);
                b.arg(&mut work.h)
                    .arg(&work.up)
                    .arg(&len)
                    .arg(&alpha)
                    .arg(&limit);
                // SAFETY: swiglu_oai_f32(gate, up, n, alpha, limit): n floats each, gate
                // updated in place.
                unsafe { b.launch(cfg) }.during("launching moe swiglu_oai")?;
            }
        }

        self.quantize_h(how, e, n, work)?;
        for s in 0..n * k {
            self.slot_matvec(
                how,
                e.down,
                ep.bias(2),
                &work.hq,
                ids,
                &mut work.down,
                s,
                s,
                ne,
            )?;
        }

        let ints = Ints::new(d, ff, e.n_expert, k);
        let ni = int(n, "moe tokens");
        let cfg = LaunchConfig {
            grid_dim: (d.div_ceil(128) as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.launch.builder(&self.combine);
        b.arg(&work.down).arg(weights).arg(residual);
        b.arg(&ni).arg(&ints.d).arg(&ints.k);
        // SAFETY: moe_combine(d, weights, out, n, n_embd, k): n*k x n_embd and n*k floats in,
        // n x n_embd updated.
        unsafe { b.launch(cfg) }.during("launching moe combine")?;
        Ok(())
    }

    /// `dst[slot][r] = W_e[r] · x[x_row]` for `e = ids[slot]`, `W` stacked by expert.
    #[allow(clippy::too_many_arguments)]
    fn slot_matvec(
        &self,
        how: &ExpertMatVec,
        w: &super::QuantMatrix,
        bias: Option<&CudaSlice<u8>>,
        x: &CudaSlice<u8>,
        ids: &CudaSlice<i32>,
        dst: &mut CudaSlice<f32>,
        slot: usize,
        x_row: usize,
        n_expert: i32,
    ) -> Result<()> {
        let rows = w.rows / n_expert as usize;
        let (si, xi) = (int(slot, "moe slot"), int(x_row, "moe row"));
        let (ri, ci) = (int(rows, "moe rows"), int(w.cols, "moe cols"));
        let cfg = LaunchConfig {
            grid_dim: (rows.div_ceil(MOE_DECODE_WARPS as usize) as u32, 1, 1),
            block_dim: (32, MOE_DECODE_WARPS, 1),
            shared_mem_bytes: 0,
        };
        let f = &self.slot_matvec[&(w.ty, narrow(how, w.ty))];
        let mut b = self.launch.builder(f);
        b.arg(&w.data).arg(x).arg(ids).arg(dst);
        b.arg(&si)
            .arg(&xi)
            .arg(&ri)
            .arg(&ci)
            .arg(&n_expert)
            .arg(bias);
        // SAFETY: moe_slot_matvec_*(w, x, ids, dst, slot, x_row, rows, cols, n_expert, bias):
        // [n_expert*rows][cols] weights, Q8_1 rows of cols (x_row among them), ids[slot],
        // dst row `slot` of `rows` floats (work sized for every slot), a bias of
        // [n_expert][rows] floats or null.
        unsafe { b.launch(cfg) }.during(format!("launching moe mat-vec for {}", w.ty))?;
        Ok(())
    }
}

/// Whether `ty` takes its `narrow_` entry points under `how`.
/// The fused kernel for `n` tokens of `ty`: its `lean_` entry where [`lean`] says so and there is
/// one (MXFP4's own entries have the lean shape; its `tight_` one where `tight` and there is
/// one: the same shape in four blocks an SM), else the wide or narrow one; and whether it has
/// the lean shape.
fn pick<'a>(
    entries: &'a HashMap<(GgmlType, usize, bool), CudaFunction>,
    lean_entries: &'a HashMap<(GgmlType, bool), CudaFunction>,
    how: &ExpertMatVec,
    tight: bool,
    ty: GgmlType,
    n: usize,
) -> (&'a CudaFunction, bool) {
    let is_lean = lean(how, ty, n);
    let shaped = lean_entries
        .get(&(ty, tight && has_tight(ty)))
        .filter(|_| is_lean);
    let f = shaped.unwrap_or_else(|| &entries[&(ty, n, narrow(how, ty))]);
    (f, is_lean)
}

/// The fused kernels' `walk` argument: `stage` (stage_args: the activations through shared
/// memory, MOE_WALK_STAGE), MOE_WALK_ROWS_L1, MOE_WALK_ONE_TOKEN, MOE_WALK_GATE_UP_ONE,
/// MOE_WALK_DOWN_EARLY and MOE_WALK_BULK_L2 where the plan asks for them.
fn walk_bits(how: &ExpertMatVec, stage: i32) -> i32 {
    let bit = |on: bool, b: i32| if on { b } else { 0 };
    stage
        | bit(how.rows_l1, WALK_ROWS_L1)
        | bit(how.down_direct, WALK_ONE_TOKEN)
        | bit(how.gate_up_direct, WALK_GATE_UP_ONE)
        | bit(how.down_early, WALK_DOWN_EARLY)
        | bit(how.bulk_l2, WALK_BULK_L2)
}

/// The kernels' MOE_WALK_* bits past MOE_WALK_STAGE (`stage_args`' 1).
const WALK_ROWS_L1: i32 = 2;
const WALK_ONE_TOKEN: i32 = 4;
const WALK_GATE_UP_ONE: i32 = 8;
const WALK_DOWN_EARLY: i32 = 16;
const WALK_BULK_L2: i32 = 32;

fn narrow(how: &ExpertMatVec, ty: GgmlType) -> bool {
    !how.wide && has_narrow(ty)
}

/// Whether `ty`'s experts take the wide walk (the one that can read staged activations).
fn walks_wide(how: &ExpertMatVec, ty: GgmlType) -> bool {
    how.wide && has_narrow(ty)
}

/// The kernels' int shape arguments.
struct Ints {
    d: i32,
    ff: i32,
    ne: i32,
    k: i32,
}

impl Ints {
    fn new(d: usize, ff: usize, ne: usize, k: usize) -> Self {
        Self {
            d: int(d, "moe n_embd"),
            ff: int(ff, "moe n_ff"),
            ne: int(ne, "moe experts"),
            k: int(k, "moe k"),
        }
    }
}

/// Scratch for `max_n` tokens of `k` experts with `n_ff` rows each fits the kernels.
fn check_work(max_n: usize, k: usize, n_ff: usize) -> Result<()> {
    if !(1..=MOE_DECODE_MAX_TOKENS).contains(&max_n)
        || k == 0
        || max_n * k > MAX_SLOTS
        || !n_ff.is_multiple_of(32)
    {
        return Err(CudaError::Invalid(format!(
            "moe decode: {max_n} tokens × {k} experts (1..={MOE_DECODE_MAX_TOKENS} tokens, at \
             most {MAX_SLOTS} slots), n_ff {n_ff} (a multiple of 32)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::MOE_DECODE;

    #[test]
    fn work_limits() {
        assert!(check_work(8, 8, 1024).is_ok());
        assert!(check_work(1, 8, 768).is_ok());
        assert!(check_work(8, 16, 768).is_ok());
        assert!(check_work(0, 8, 1024).is_err());
        assert!(check_work(9, 8, 1024).is_err());
        assert!(check_work(8, 17, 1024).is_err());
        assert!(check_work(1, 0, 1024).is_err());
        assert!(check_work(1, 8, 1000).is_err());
    }

    /// The host's launch geometry and formats are the kernel file's.
    #[test]
    fn geometry_and_formats_match_the_kernel() {
        let src = MOE_DECODE.source;
        assert!(src.contains(&format!("#define MOE_NWARPS {MOE_DECODE_WARPS}")));
        assert!(src.contains("#define MOE_LEAN(T, N) ((T) == GGML_TYPE_MXFP4 && (N) == 1)"));
        assert!(src.contains("#define MOE_GATE_ROWS_AS(LEAN, N) ((LEAN) ? 2 : (N) <= 2 ? 4 : 1)"));
        assert!(src.contains("#define MOE_DOWN_ROWS_AS(LEAN, N) ((LEAN) ? 4 : (N) <= 2 ? 8 : 2)"));
        assert_eq!(
            (
                gate_rows(false, 1),
                gate_rows(false, 2),
                gate_rows(false, 3),
                down_rows(false, 1),
                down_rows(false, 2),
                down_rows(false, 3)
            ),
            (4, 4, 1, 8, 8, 2)
        );
        assert_eq!((gate_rows(true, 1), down_rows(true, 1)), (2, 4));
        // MXFP4 at one token is always lean; the K-quants' lean entries where the plan asks.
        let (q4k, mx) = (GgmlType::Q4K, GgmlType::Mxfp4);
        let how = |lean| ExpertMatVec {
            fused: true,
            wide: true,
            x_quant: crate::ops::ActQuant::Q8K,
            h_quant: crate::ops::ActQuant::Q8K,
            gate_up_warps: 4,
            down_prefetch: false,
            h_in_gate_up: false,
            rows_l1: false,
            tight_gate_up: false,
            tight_down: false,
            down_early: false,
            bulk_l2: false,
            down_direct: true,
            gate_up_direct: false,
            lean,
        };
        assert!(lean(&how(false), mx, 1) && !lean(&how(false), mx, 2));
        assert!(
            !lean(&how(false), q4k, 1) && lean(&how(true), q4k, 1) && !lean(&how(true), q4k, 2)
        );
        for ty in [q4k, GgmlType::Q5K, GgmlType::Q6K] {
            let name = super::super::kernel_suffix(ty);
            assert!(
                src.contains(&format!("MOE_ENTRIES_AS(lean_{name}, ")),
                "{name}"
            );
            let tight = format!("MOE_ENTRIES_AS(tight_{name}, ");
            assert_eq!(src.contains(&tight), has_tight(ty), "{name}");
        }
        assert!(src.contains(&format!("#define MOE_MAX_SLOTS {MAX_SLOTS}")));
        assert!(src.contains("#define MOE_WALK_STAGE 1"));
        assert!(src.contains(&format!("#define MOE_WALK_ROWS_L1 {WALK_ROWS_L1}")));
        assert!(src.contains(&format!("#define MOE_WALK_ONE_TOKEN {WALK_ONE_TOKEN}")));
        assert!(src.contains(&format!("#define MOE_WALK_GATE_UP_ONE {WALK_GATE_UP_ONE}")));
        assert!(src.contains(&format!("#define MOE_WALK_DOWN_EARLY {WALK_DOWN_EARLY}")));
        assert!(src.contains(&format!("#define MOE_WALK_BULK_L2 {WALK_BULK_L2}")));
        assert!(src.contains(&format!(
            "MOE_ENTRIES(NAME, TYPE, {MOE_DECODE_MAX_TOKENS}, WIDE)"
        )));
    }
}
