//! `kernels/moe_gemm.cu`: the MoE FFN of a prefill batch with the routes already chosen, as a
//! grouped int8 GEMM over all experts (expert-sorted index built on the device, gate/up with
//! SwiGLU fused, down scaled by the routing weight, slots combined in order).
//!
//! Contract: the same int8 arithmetic as [`Mmq`](super::Mmq) (weights × Q8_1 activations,
//! exact integer dots, f32 scale products; Q4_K in the CPU expert matmuls' integer-scale
//! order under 256 tokens, the plan's `expert_order`), with `h = silu(gate) * up` rounded to Q8_1 before
//! the down GEMM, as the CPU's matmul rounds its input. `cuda-parity` holds it to
//! `|cuda - cpu| ≤ 5e-3 · Σ_slot w · Σ_j |down[r][j] · h[j]|` against the CPU's per-expert loop
//! (int8 rounding twice, Q8_1 here and Q8_K there). Deterministic: no atomics, slots summed in
//! order, the same inputs give the same bits; the per-expert fallback gives the same bits too.
//!
//! Experts held as floats (F32/F16/BF16 files) take `moe_f32_gate_up`/`moe_f32_down` instead,
//! a warp per output straight from the routes, f32 throughout (within f32 summation order of
//! the CPU), for any token count.
//!
//! Not grouped (`FERROLM_MOE_GROUPED=0`), the GEMMs launch once per expert (each launch reads
//! its segment from device memory) instead of once for all experts, for bisecting the
//! tile-to-expert map. Which path, orders and quantizations: the plan's ([`ExpertGemm`]).

use super::formats;
use super::launch::Launcher;
use super::mmq::{smem_bytes, GemmFn, MMQ_BK};
use super::moe_mma::{MoeMma, MoeMmaIo};
use super::{int, stride_blocks, ActQuant, MoeExperts, Quantize};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MOE_GEMM;
use crate::plan::ExpertGemm;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// The GEMM tile of moe_gemm.cu (its MoeTileCfg): weight rows, pair rows, warps.
const MOE_BM: usize = 64;
const MOE_BN: usize = 64;
const MOE_WARPS: u32 = 4;
/// Threads of the index kernels (the kernel's MOE_INDEX_THREADS).
const INDEX_THREADS: u32 = 256;
/// Rows of one quantize launch (its grid's y dimension), so pairs per batch at most this.
pub const MOE_MAX_PAIRS: usize = 65_535;
/// The most pairs, and experts, of an index built by one block (`moe_index_one_block`, the
/// kernel's MOE_INDEX_ONE_BLOCK_PAIRS and _EXPERTS).
pub const MOE_INDEX_ONE_BLOCK_PAIRS: usize = 512;
pub const MOE_INDEX_ONE_BLOCK_EXPERTS: usize = 1024;

/// Warps a block of the float-expert kernels (moe_gemm.cu's FLOAT_WARPS).
const FLOAT_WARPS: usize = 8;

/// Experts held as floats (F32/F16/BF16 files, held as F32): they take `moe_f32_*`, not the
/// int8 GEMMs.
pub fn is_float(x: &MoeExperts) -> bool {
    [x.gate, x.up, x.down]
        .iter()
        .all(|m| formats::has(m.ty, |f| f.float))
}

/// What the grouped kernels need of a layer's experts, beyond [`MoeExperts::check`]'s shapes:
/// formats with a GEMM kernel and widths in whole k-steps (float experts: any width).
fn check(x: &MoeExperts) -> Result<()> {
    let (e, ff, d) = (x.n_expert, x.n_ff, x.n_embd());
    let bad = |what: String| Err(CudaError::Invalid(format!("moe_gemm: {what}")));
    if e == 0 || x.n_used == 0 || x.n_used > e {
        return bad(format!("{} of {e} experts per token", x.n_used));
    }
    let float = is_float(x);
    if x.gate.ty != x.up.ty {
        return bad(format!("gate {} and up {} differ", x.gate.ty, x.up.ty));
    }
    for (name, m, rows, cols) in [
        ("gate", x.gate, e * ff, d),
        ("up", x.up, e * ff, d),
        ("down", x.down, e * d, ff),
    ] {
        if (m.rows, m.cols) != (rows, cols) {
            return bad(format!(
                "{name} is {}×{}, want {rows}×{cols} ({e} experts, n_ff {ff}, n_embd {d})",
                m.rows, m.cols
            ));
        }
        if !float && !formats::has(m.ty, |f| f.experts) {
            return bad(format!("no kernel for {} {name} weights", m.ty));
        }
    }
    if !float && !MoeGemm::supports_widths(x.gate.ty, x.down.ty, d, ff) {
        return bad(format!(
            "n_embd {d} and n_ff {ff} are not rows the GEMM tiles take ({MMQ_BK}s, or 32s of \
             4-byte aligned rows of a 32-element block format)"
        ));
    }
    Ok(())
}

/// Scratch for [`MoeGemm::forward`], sized for `max_tokens` once and reused (nothing is
/// allocated per call, so a forward can be captured in a CUDA graph).
pub struct MoeWork {
    max_tokens: usize,
    n_embd: usize,
    n_ff: usize,
    n_expert: usize,
    n_used: usize,
    /// Q8_1 of the tokens' activations, each quantized once for all its experts.
    xq: CudaSlice<u8>,
    /// counts[E], offsets[E + 1], tile_starts[E + 1].
    index: CudaSlice<i32>,
    /// Pair ids (`token * n_used + slot`) by expert, ascending within an expert.
    sorted: CudaSlice<i32>,
    /// silu(gate) * up per pair, rows in sorted order, then its Q8_1.
    h: CudaSlice<f32>,
    hq: CudaSlice<u8>,
    /// Weighted down output per pair id, before the combine.
    y: CudaSlice<f32>,
}

impl MoeWork {
    pub fn new(dev: &CudaDevice, max_tokens: usize, experts: &MoeExperts) -> Result<Self> {
        check(experts)?;
        let (d, ff, e, k) = (
            experts.n_embd(),
            experts.n_ff,
            experts.n_expert,
            experts.n_used,
        );
        let pairs = max_tokens * k;
        if max_tokens == 0 || pairs > MOE_MAX_PAIRS {
            return Err(CudaError::Invalid(format!(
                "moe_gemm: scratch for {max_tokens} tokens × {k} experts: want 1 to \
                 {MOE_MAX_PAIRS} pairs; split the batch"
            )));
        }
        Ok(Self {
            max_tokens,
            n_embd: d,
            n_ff: ff,
            n_expert: e,
            n_used: k,
            xq: dev.zeros(Quantize::q8_1_bytes(max_tokens, d))?,
            index: dev.zeros(3 * e + 2)?,
            sorted: dev.zeros(pairs.max(1))?,
            h: dev.zeros(pairs * ff)?,
            hq: dev.zeros(Quantize::q8_1_bytes(pairs, ff))?,
            y: dev.zeros(pairs * d)?,
        })
    }

    /// counts[E], offsets[E + 1], tile_starts[E + 1] of the last index built.
    pub fn index(&self) -> &CudaSlice<i32> {
        &self.index
    }

    /// Pair ids by expert (the first `offsets[E]` entries are meaningful).
    pub fn sorted(&self) -> &CudaSlice<i32> {
        &self.sorted
    }

    /// The index, the sorted pair ids, and the down products by pair id (what
    /// [`MoeGemm::combine`] sums), for a path that computes them itself.
    pub(crate) fn index_sorted_y(
        &mut self,
    ) -> (&CudaSlice<i32>, &CudaSlice<i32>, &mut CudaSlice<f32>) {
        (&self.index, &self.sorted, &mut self.y)
    }

    fn fits(&self, experts: &MoeExperts) -> Result<()> {
        let want = (self.n_embd, self.n_ff, self.n_expert, self.n_used);
        let got = (
            experts.n_embd(),
            experts.n_ff,
            experts.n_expert,
            experts.n_used,
        );
        if want != got {
            return Err(CudaError::Invalid(format!(
                "moe_gemm: scratch made for (n_embd, n_ff, experts, used) = {want:?}, given {got:?}"
            )));
        }
        Ok(())
    }
}

pub struct MoeGemm {
    launch: Launcher,
    quantize: Quantize,
    count: CudaFunction,
    scatter: CudaFunction,
    /// moe_count and moe_scatter in one block, for few pairs.
    index_one_block: CudaFunction,
    combine: CudaFunction,
    /// Float experts: moe_f32_gate_up, moe_f32_down.
    float: (CudaFunction, CudaFunction),
    /// type -> (moe_gate_up_<type>, moe_down_<type>).
    gemms: HashMap<GgmlType, (GemmFn, GemmFn)>,
    /// The tensor-core mat-vec in place of the tiles (`ExpertGemm::Int8::matvec_mma`).
    mma: MoeMma,
}

impl MoeGemm {
    /// Whether the int8 GEMMs take experts of these widths: whole k-steps (float experts take
    /// any; the plan runs the others through `moe_decode` in slices).
    /// Whether the GEMM tiles take experts of `gate_up` and `down` weights of these widths
    /// ([`Mmq::tiles_take`](super::Mmq::tiles_take)).
    pub fn supports_widths(gate_up: GgmlType, down: GgmlType, n_embd: usize, n_ff: usize) -> bool {
        super::Mmq::tiles_take(gate_up, n_embd) && super::Mmq::tiles_take(down, n_ff)
    }

    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let mut gemms = HashMap::new();
        for ty in formats::with(|f| f.experts) {
            let name = super::kernel_suffix(ty);
            let threads = 32 * MOE_WARPS;
            // Gate and up share the activation tile: two raw weight tiles per stage.
            let gate_up = GemmFn::load(
                dev,
                &MOE_GEMM,
                &format!("moe_gate_up_{name}"),
                smem_bytes(ty, MOE_BM, MOE_BN, 2),
                threads,
            )?;
            let down = GemmFn::load(
                dev,
                &MOE_GEMM,
                &format!("moe_down_{name}"),
                smem_bytes(ty, MOE_BM, MOE_BN, 1),
                threads,
            )?;
            gemms.insert(ty, (gate_up, down));
        }
        Ok(Self {
            launch: launch.clone(),
            quantize: Quantize::load(dev, launch)?,
            count: dev.function(&MOE_GEMM, "moe_count")?,
            scatter: dev.function(&MOE_GEMM, "moe_scatter")?,
            index_one_block: dev.function(&MOE_GEMM, "moe_index_one_block")?,
            combine: dev.function(&MOE_GEMM, "moe_combine")?,
            float: (
                dev.function(&MOE_GEMM, "moe_f32_gate_up")?,
                dev.function(&MOE_GEMM, "moe_f32_down")?,
            ),
            gemms,
            mma: MoeMma::load(dev, launch)?,
        })
    }

    /// `out[t] = Σ_slot weights[t·k + slot] · down_e(silu(gate_e · x[t]) · (up_e · x[t]))`
    /// with `e = ids[t·k + slot]`, for the `n` rows of `x` (`k = n_used`), as `how` says (the
    /// plan's: float kernels, or the int8 GEMMs grouped or per expert); a pair whose id is not
    /// an expert adds nothing. Queued on the stream; no synchronisation, no allocation.
    /// `xq`: `x` already quantized as `how`'s `x_quant` (the blocks of the norm that made
    /// it), or None to quantize it here.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        how: &ExpertGemm,
        x: &CudaSlice<f32>,
        xq: Option<&CudaSlice<u8>>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        check(experts)?;
        work.fits(experts)?;
        let (d, ff, e, k) = (work.n_embd, work.n_ff, work.n_expert, work.n_used);
        let pairs = n * k;
        if n > work.max_tokens {
            return Err(CudaError::Invalid(format!(
                "moe_gemm: {n} tokens, scratch made for {}",
                work.max_tokens
            )));
        }
        if x.len() < n * d || ids.len() < pairs || weights.len() < pairs || out.len() < n * d {
            return Err(CudaError::Invalid(format!(
                "moe_gemm: buffers too small for {n} tokens of {d} with {k} experts each"
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let ep = experts.epilogue;
        let (alpha, limit) = ep.act_args();
        let (grouped, x_quant, h_quant, gate_up_order, down_order, mma, one_block) = match *how {
            ExpertGemm::Float if is_float(experts) && ep.biases.is_none() && limit == 0.0 => {
                return self.forward_float(x, n, ids, weights, experts, work, out);
            }
            ExpertGemm::Int8 {
                grouped,
                x_quant,
                h_quant,
                gate_up,
                down,
                matvec_mma,
                index_one_block,
            } if !is_float(experts) => (
                grouped,
                x_quant,
                h_quant,
                gate_up as i32,
                down as i32,
                matvec_mma,
                index_one_block,
            ),
            ExpertGemm::Float if is_float(experts) => {
                return Err(CudaError::Invalid(
                    "moe_gemm: float experts with biases or swiglu_oai (gpt-oss's) have no \
                     kernel; quantize the experts (MXFP4, as released)"
                        .into(),
                ))
            }
            _ => {
                return Err(CudaError::Invalid(format!(
                    "moe_gemm: {how:?} for {} experts",
                    experts.gate.ty
                )))
            }
        };
        let st = self.launch.stream().clone();
        crate::profile::span(&st, "moe.index", || {
            self.build_index(ids, n, work, one_block)?;
            match xq {
                Some(_) => Ok(()),
                None => self.quantize.rows(x, n, d, x_quant, &mut work.xq),
            }
        })?;
        if let Some(tiles) = mma {
            return self.forward_mma(tiles, h_quant, xq, ids, n, weights, experts, work, out);
        }
        let xq = xq.unwrap_or(&work.xq);
        let gate_up_g = &self.gemms[&experts.gate.ty].0;
        let down_g = &self.gemms[&experts.down.ty].1;
        let gate_up = gate_up_g.get(&format!("moe_gate_up for {}", experts.gate.ty))?;
        let down_fn = down_g.get(&format!("moe_down for {}", experts.down.ty))?;
        let (ci, ffi, ei, ki) = (
            int(d, "n_embd"),
            int(ff, "n_ff"),
            int(e, "experts"),
            int(k, "experts used"),
        );
        // (expert, tile slots) per launch: one for all, or one per expert.
        let pair_tiles = pairs.div_ceil(MOE_BN);
        let launches: Vec<(i32, usize)> = if grouped {
            vec![(-1, pair_tiles + e)]
        } else {
            (0..e).map(|i| (i as i32, pair_tiles)).collect()
        };
        let gate_up_span = crate::profile::span(&st, "moe.gate_up", || -> Result<()> {
            for &(expert, slots) in &launches {
                let mut b = self.launch.builder(gate_up);
                b.arg(&experts.gate.data)
                    .arg(&experts.up.data)
                    .arg(xq)
                    .arg(&work.sorted)
                    .arg(&work.index)
                    .arg(&mut work.h)
                    .arg(&ci)
                    .arg(&ffi)
                    .arg(&ei)
                    .arg(&ki)
                    .arg(&expert)
                    .arg(&gate_up_order)
                    .arg(ep.bias(0))
                    .arg(ep.bias(1))
                    .arg(&alpha)
                    .arg(&limit);
                // SAFETY: moe_gate_up_<type>(gate, up, xq, sorted, index, h, n_embd, n_ff, E, k,
                // expert, order, gate_bias, up_bias, alpha, limit): shapes checked above (the
                // biases [E][n_ff] floats or null); h has pairs × n_ff floats, and a block writes
                // only sorted positions below offsets[E] <= pairs.
                unsafe { b.launch(gemm_cfg(ff, slots, gate_up_g.smem)?) }
                    .during(format!("launching moe_gate_up for {}", experts.gate.ty))?;
            }
            Ok(())
        });
        gate_up_span?;
        let down_span = crate::profile::span(&st, "moe.down", || -> Result<()> {
            self.quantize
                .rows(&work.h, pairs, ff, h_quant, &mut work.hq)?;
            for &(expert, slots) in &launches {
                let mut b = self.launch.builder(down_fn);
                b.arg(&experts.down.data)
                    .arg(&work.hq)
                    .arg(&work.sorted)
                    .arg(&work.index)
                    .arg(weights)
                    .arg(&mut work.y)
                    .arg(&ffi)
                    .arg(&ci)
                    .arg(&ei)
                    .arg(&expert)
                    .arg(&down_order)
                    .arg(ep.bias(2));
                // SAFETY: moe_down_<type>(down, hq, sorted, index, weights, y, n_ff, n_embd, E,
                // expert, order, down_bias): y has pairs × n_embd floats, written at pair ids <
                // pairs; the bias [E][n_embd] floats or null.
                unsafe { b.launch(gemm_cfg(d, slots, down_g.smem)?) }
                    .during(format!("launching moe_down for {}", experts.down.ty))?;
            }
            Ok(())
        });
        down_span?;
        self.combine(work, ids, n, out)
    }

    /// [`forward`](Self::forward)'s products on the tensor-core mat-vec (`moe_mma.cu`, `tiles`
    /// column tiles), after the index and x's quantization: the same bits as the grouped GEMM
    /// in the per-sub-block order.
    #[allow(clippy::too_many_arguments)]
    fn forward_mma(
        &self,
        tiles: usize,
        h_quant: ActQuant,
        xq: Option<&CudaSlice<u8>>,
        ids: &CudaSlice<i32>,
        n: usize,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let st = self.launch.stream().clone();
        crate::profile::span(&st, "moe.gate_up", || {
            let io = MoeMmaIo {
                acts: xq.unwrap_or(&work.xq),
                sorted: &work.sorted,
                index: &work.index,
                weights: None,
                out: &mut work.h,
            };
            self.mma.gate_up(tiles, experts, io)
        })?;
        crate::profile::span(&st, "moe.down", || {
            let pairs = n * work.n_used;
            self.quantize
                .rows(&work.h, pairs, work.n_ff, h_quant, &mut work.hq)?;
            let io = MoeMmaIo {
                acts: &work.hq,
                sorted: &work.sorted,
                index: &work.index,
                weights: Some(weights),
                out: &mut work.y,
            };
            self.mma.down(tiles, experts, io)
        })?;
        self.combine(work, ids, n, out)
    }

    /// [`forward`](Self::forward) for float experts: `moe_f32_gate_up` and `moe_f32_down` per
    /// (token, slot) pair straight from the routes (no index, no quantization), then the
    /// combine. Shapes checked by the caller.
    #[allow(clippy::too_many_arguments)]
    fn forward_float(
        &self,
        x: &CudaSlice<f32>,
        n: usize,
        ids: &CudaSlice<i32>,
        weights: &CudaSlice<f32>,
        experts: &MoeExperts,
        work: &mut MoeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (d, ff, e, k) = (work.n_embd, work.n_ff, work.n_expert, work.n_used);
        let (ci, ffi, ei, ki) = (
            int(d, "n_embd"),
            int(ff, "n_ff"),
            int(e, "experts"),
            int(k, "experts used"),
        );
        let cfg = |rows: usize| LaunchConfig {
            grid_dim: ((n * k) as u32, rows.div_ceil(FLOAT_WARPS) as u32, 1),
            block_dim: (32, FLOAT_WARPS as u32, 1),
            shared_mem_bytes: 0,
        };
        let st = self.launch.stream().clone();
        crate::profile::span(&st, "moe.gate_up", || {
            let mut b = self.launch.builder(&self.float.0);
            b.arg(&experts.gate.data)
                .arg(&experts.up.data)
                .arg(x)
                .arg(ids)
                .arg(&mut work.h)
                .arg(&ci)
                .arg(&ffi)
                .arg(&ei)
                .arg(&ki);
            // SAFETY: moe_f32_gate_up(gate, up, x, ids, h, n_embd, n_ff, E, k): E·n_ff rows of
            // n_embd floats each, n rows of x, n·k ids, h holds n·k rows of n_ff (n·k <=
            // MOE_MAX_PAIRS, checked by forward).
            unsafe { b.launch(cfg(ff)) }.during("launching moe_f32_gate_up")
        })?;
        crate::profile::span(&st, "moe.down", || {
            let mut b = self.launch.builder(&self.float.1);
            b.arg(&experts.down.data)
                .arg(&work.h)
                .arg(ids)
                .arg(weights)
                .arg(&mut work.y)
                .arg(&ffi)
                .arg(&ci)
                .arg(&ei);
            // SAFETY: moe_f32_down(down, h, ids, weights, y, n_ff, n_embd, E): E·n_embd rows of
            // n_ff floats, n·k rows of h, ids and weights; y holds n·k rows of n_embd.
            unsafe { b.launch(cfg(d)) }.during("launching moe_f32_down")
        })?;
        self.combine(work, ids, n, out)
    }

    /// out[t] = Σ_slot y[t·k + slot] over the slots with an expert, in slot order.
    pub(crate) fn combine(
        &self,
        work: &MoeWork,
        ids: &CudaSlice<i32>,
        n: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (d, k, e) = (work.n_embd, work.n_used, work.n_expert);
        let (ci, ki, ei) = (int(d, "n_embd"), int(k, "experts used"), int(e, "experts"));
        let st = self.launch.stream().clone();
        let (ni, total) = (int(n, "tokens"), n * d);
        let mut b = self.launch.builder(&self.combine);
        b.arg(&work.y)
            .arg(ids)
            .arg(out)
            .arg(&ni)
            .arg(&ki)
            .arg(&ci)
            .arg(&ei);
        let cfg = LaunchConfig {
            grid_dim: (stride_blocks(total, INDEX_THREADS), 1, 1),
            block_dim: (INDEX_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: moe_combine(y, ids, out, ntok, k, n_embd, E): n·k ids, n × n_embd out.
        crate::profile::span(&st, "moe.combine", || unsafe { b.launch(cfg) })
            .during("launching moe_combine")?;
        Ok(())
    }

    /// The expert-sorted index of the `n · n_used` pairs of `ids` into `work` (its `index` and
    /// `sorted`); part of [`forward`](Self::forward), public for checking. With `one_block`
    /// (the plan's [`ExpertGemm::Int8`] `index_one_block`), few enough pairs and experts take
    /// one launch of one block (`moe_index_one_block`) instead of two of E blocks: the same
    /// index, entry for entry.
    pub fn build_index(
        &self,
        ids: &CudaSlice<i32>,
        n: usize,
        work: &mut MoeWork,
        one_block: bool,
    ) -> Result<()> {
        let pairs = n * work.n_used;
        if n > work.max_tokens || ids.len() < pairs {
            return Err(CudaError::Invalid(format!(
                "moe index: {n} tokens ({} ids) for scratch of {} tokens",
                ids.len(),
                work.max_tokens
            )));
        }
        let (pi, ei) = (int(pairs, "pairs"), int(work.n_expert, "experts"));
        // One block does both steps where it can; else moe_count, then moe_scatter with the
        // same arguments as the one block's.
        let one = one_block
            && pairs <= MOE_INDEX_ONE_BLOCK_PAIRS
            && work.n_expert <= MOE_INDEX_ONE_BLOCK_EXPERTS;
        let cfg = LaunchConfig {
            grid_dim: (if one { 1 } else { work.n_expert as u32 }, 1, 1),
            block_dim: (INDEX_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        if !one {
            let mut b = self.launch.builder(&self.count);
            b.arg(ids).arg(&pi).arg(&ei).arg(&mut work.index);
            // SAFETY: moe_count(ids, pairs, E, index): block e writes index[e], e < E.
            unsafe { b.launch(cfg) }.during("launching moe_count")?;
        }
        let (f, name) = if one {
            (&self.index_one_block, "moe_index_one_block")
        } else {
            (&self.scatter, "moe_scatter")
        };
        let mut b = self.launch.builder(f);
        b.arg(ids)
            .arg(&pi)
            .arg(&ei)
            .arg(&mut work.index)
            .arg(&mut work.sorted);
        // SAFETY: moe_scatter / moe_index_one_block(ids, pairs, E, index, sorted): index has
        // 3E + 2 ints, sorted gets at most `pairs` entries; the one block's pairs and E within
        // its shared arrays (checked above).
        unsafe { b.launch(cfg) }.during(format!("launching {name}"))?;
        Ok(())
    }
}

/// Block (32, MOE_WARPS); grid (row tiles, tile slots); `smem` bytes of dynamic shared memory.
fn gemm_cfg(rows: usize, slots: usize, smem: usize) -> Result<LaunchConfig> {
    if slots > 65_535 {
        return Err(CudaError::Invalid(format!(
            "moe_gemm: {slots} tiles is past the grid's limit"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (
            int(rows.div_ceil(MOE_BM), "row tiles") as u32,
            slots as u32,
            1,
        ),
        block_dim: (32, MOE_WARPS, 1),
        shared_mem_bytes: smem as u32,
    })
}
