//! `cuda-parity` rows and timing for the grouped MoE GEMM (`moe_gemm.cu`), with the routes held
//! fixed: the same ids and weights go to the GPU and to a CPU per-expert loop (`matmul` with
//! its int8 activations, `swiglu`, `matmul`, weighted sum, as `ferrolm_cpu::moe` does after
//! routing).

use super::checks::{normal, poisoned, row};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cpu::matmul::{matmul_ordered, Order, WeightRef};
use ferrolm_cpu::norm::{add_bias, swiglu, swiglu_oai};
use ferrolm_cpu::CpuPlan;
use ferrolm_cuda::ops::{
    ActQuant, ExpertBufs, ExpertEpilogue, MmqOrder, MmvqMma, MoeDecodeWork, MoeExperts,
    MoeSliceWork, MoeWork, QuantMatrix, Quantize, MOE_MMA_TILES,
};
use ferrolm_cuda::plan::{ExpertGemm, MoePath, MoeShape};
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use rayon::prelude::*;

/// One MoE shape: `n` tokens, `k` of `n_expert` experts each, drawn from the first `live`
/// experts (fewer than `n_expert` leaves some experts empty).
#[derive(Clone, Copy)]
pub struct MoeCase {
    pub n: usize,
    pub n_expert: usize,
    pub k: usize,
    pub live: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub gate_up: GgmlType,
    pub down: GgmlType,
    /// gpt-oss's epilogue: random expert biases and swiglu_oai (alpha 1.702, limit 7).
    pub oai: bool,
}

/// gpt-oss's swiglu_oai constants (ferrolm_model's `moe_act`).
const OAI: (f32, f32) = (1.702, 7.0);

/// The expert biases of a case (gate, up, down: `[n_expert][width]`), empty without `oai`.
fn biases(rng: &mut StdRng, c: &MoeCase) -> [Vec<f32>; 3] {
    if !c.oai {
        return Default::default();
    }
    let (e, ff, d) = (c.n_expert, c.n_ff, c.n_embd);
    [
        normal(rng, e * ff, 1.0),
        normal(rng, e * ff, 1.0),
        normal(rng, e * d, 0.5),
    ]
}

/// The gate/up weights' spread: with swiglu_oai, gate and up of about 3 (the biases' 1
/// beside), so that its clamps at ±7 are reached now and then, not always.
fn gate_up_sigma(c: &MoeCase) -> f32 {
    if c.oai {
        3.0 / (c.n_embd as f32).sqrt()
    } else {
        1.0
    }
}

/// The device copies of `biases` (as bytes, the way the backend holds them).
fn upload_biases(dev: &CudaDevice, b: &[Vec<f32>; 3]) -> Result<Option<[CudaSlice<u8>; 3]>> {
    if b[0].is_empty() {
        return Ok(None);
    }
    let up =
        |v: &Vec<f32>| dev.upload(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    Ok(Some([up(&b[0])?, up(&b[1])?, up(&b[2])?]))
}

fn epilogue<'a>(c: &MoeCase, b: &'a Option<[CudaSlice<u8>; 3]>) -> ExpertEpilogue<'a> {
    ExpertEpilogue {
        biases: b.as_ref().map(|[g, u, d]| [g, u, d]),
        swiglu_oai: c.oai.then_some(OAI),
    }
}

/// The cases `cuda-parity` runs: OLMoE's widths with 16 experts, Q4_K gate/up and both down
/// formats of Q4_K_M files, then a few tokens with empty experts at Qwen3-MoE's n_ff, then the
/// legacy 5-bit formats (Q5_0/Q5_1 files, Q4_K_M's fallback for odd widths) both ways round,
/// then MXFP4 experts (gpt-oss's format) at GEMM widths, many tokens and a few.
pub fn cases() -> Vec<MoeCase> {
    let olmoe = |n, down| MoeCase {
        n,
        n_expert: 16,
        k: 8,
        live: 16,
        n_embd: 2048,
        n_ff: 1024,
        gate_up: GgmlType::Q4K,
        down,
        oai: false,
    };
    let few = |n| MoeCase {
        n,
        live: 10,
        n_ff: 768,
        ..olmoe(n, GgmlType::Q6K)
    };
    let q5 = |n, gate_up, down| MoeCase {
        n,
        gate_up,
        ..olmoe(n, down)
    };
    vec![
        olmoe(512, GgmlType::Q4K),
        olmoe(512, GgmlType::Q6K),
        // Batched decode steps: 4 and 32 pairs an expert (the mat-vec's one pass and several).
        olmoe(8, GgmlType::Q6K),
        olmoe(64, GgmlType::Q4K),
        few(1),
        few(3),
        q5(300, GgmlType::Q5_0, GgmlType::Q5_1),
        q5(77, GgmlType::Q5_1, GgmlType::Q5_0),
        q5(300, GgmlType::Mxfp4, GgmlType::Mxfp4),
        MoeCase {
            gate_up: GgmlType::Mxfp4,
            down: GgmlType::Mxfp4,
            ..few(3)
        },
        MoeCase {
            oai: true,
            ..q5(300, GgmlType::Mxfp4, GgmlType::Mxfp4)
        },
        // gpt-oss's widths (2880 → 2880, not whole k steps: the last partly zero), top-4.
        MoeCase {
            n: 300,
            n_expert: 8,
            k: 4,
            live: 8,
            n_embd: 2880,
            n_ff: 2880,
            gate_up: GgmlType::Mxfp4,
            down: GgmlType::Mxfp4,
            oai: true,
        },
    ]
}

/// The cases of the decode kernels in slices (`moe_slices`; widths the GEMM tiles take run
/// the grouped GEMM's rows instead): int8 experts of widths the GEMM once did not take, the
/// shape-space goldens' (OLMoE d256 with n_ff 96, Q4_K gate/up and Q8_0 down; d320 with n_ff
/// 64 and Q5_0 gate/up), Q5_1 gate/up with Q5_0 down, and MXFP4 experts
/// at gpt-oss's widths (2880 → 2880, top-4; 6 experts, not its 32, to keep the CPU side short)
/// for 8 tokens, the decode kernels' most (one slice), plain and with its biases and swiglu_oai.
pub fn slice_cases() -> Vec<MoeCase> {
    let d256 = MoeCase {
        n: 76,
        n_expert: 6,
        k: 2,
        live: 6,
        n_embd: 256,
        n_ff: 96,
        gate_up: GgmlType::Q4K,
        down: GgmlType::Q8_0,
        oai: false,
    };
    let d320 = MoeCase {
        n: 15,
        n_expert: 12,
        k: 5,
        live: 12,
        n_embd: 320,
        n_ff: 64,
        gate_up: GgmlType::Q5_0,
        ..d256
    };
    let q5_1 = MoeCase {
        n: 20,
        gate_up: GgmlType::Q5_1,
        down: GgmlType::Q5_0,
        ..d320
    };
    let gpt_oss = MoeCase {
        n: 8,
        n_expert: 6,
        k: 4,
        live: 6,
        n_embd: 2880,
        n_ff: 2880,
        gate_up: GgmlType::Mxfp4,
        down: GgmlType::Mxfp4,
        oai: false,
    };
    let gpt_oss_biased = MoeCase {
        oai: true,
        ..gpt_oss
    };
    vec![d256, d320, q5_1, gpt_oss, gpt_oss_biased]
}

/// Distinct experts per token from the first `live`, and positive weights summing to one.
fn routes(rng: &mut StdRng, c: &MoeCase) -> (Vec<i32>, Vec<f32>) {
    let mut ids = Vec::with_capacity(c.n * c.k);
    let mut weights = Vec::with_capacity(c.n * c.k);
    let mut experts: Vec<i32> = (0..c.live as i32).collect();
    for _ in 0..c.n {
        experts.shuffle(rng);
        ids.extend_from_slice(&experts[..c.k]);
        let w: Vec<f32> = (0..c.k).map(|_| rng.gen_range(0.05f32..1.0)).collect();
        let sum: f32 = w.iter().sum();
        weights.extend(w.iter().map(|v| v / sum));
    }
    (ids, weights)
}

/// The index the kernels must build: counts, offsets, tile starts (64-row tiles), and the pair
/// ids sorted by expert, ascending within one.
fn host_index(ids: &[i32], n_expert: usize) -> (Vec<i32>, Vec<i32>) {
    let mut counts = vec![0i32; n_expert];
    for &e in ids {
        counts[e as usize] += 1;
    }
    let mut index = counts.clone();
    let (mut off, mut tiles) = (vec![0i32], vec![0i32]);
    for &c in &counts {
        off.push(off.last().unwrap() + c);
        tiles.push(tiles.last().unwrap() + (c + 63) / 64);
    }
    index.extend(off);
    index.extend(tiles);
    let mut sorted: Vec<i32> = (0..ids.len() as i32).collect();
    sorted.sort_by_key(|&p| ids[p as usize]); // stable: pair order within an expert
    (index, sorted)
}

/// Index, grouped block against the CPU, and the per-expert fallback against the grouped path.
pub fn moe_block(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    c: MoeCase,
) -> Result<Vec<Row>> {
    let (n, e, d, ff) = (c.n, c.n_expert, c.n_embd, c.n_ff);
    let gate_up_ty = c.gate_up;
    let sigma = gate_up_sigma(&c);
    let gq = ferrolm_quant::quantize_to_vec(gate_up_ty, &normal(rng, e * ff * d, sigma))?;
    let uq = ferrolm_quant::quantize_to_vec(gate_up_ty, &normal(rng, e * ff * d, sigma))?;
    // Small down weights keep h·down near the size of x, as in a trained model.
    let dq = ferrolm_quant::quantize_to_vec(c.down, &normal(rng, e * d * ff, 0.05))?;
    let x = normal(rng, n * d, 1.0);
    let (ids, weights) = routes(rng, &c);
    let bias = biases(rng, &c);
    let bias_dev = upload_biases(dev, &bias)?;

    let gate = QuantMatrix::upload(dev, gate_up_ty, e * ff, d, &gq)?;
    let up = QuantMatrix::upload(dev, gate_up_ty, e * ff, d, &uq)?;
    let down = QuantMatrix::upload(dev, c.down, e * d, ff, &dq)?;
    let experts = MoeExperts {
        gate: &gate,
        up: &up,
        down: &down,
        n_expert: e,
        n_used: c.k,
        n_ff: ff,
        epilogue: epilogue(&c, &bias_dev),
    };
    let mut work = MoeWork::new(dev, n, &experts)?;
    let (xd, idsd, wd) = (dev.upload(&x)?, dev.upload(&ids)?, dev.upload(&weights)?);
    let mut out = poisoned(dev, n * d)?;
    // The backend's orders and quantizations for this shape, grouped and then per expert;
    // the index by one block (where the pairs are few enough) and by two launches, x
    // quantized inside and beforehand (as a norm's blocks).
    let how = plan.expert_gemm(&MoeShape::new(&experts, n));
    let grouped = how.with_grouped(true).with_index_one_block(true);
    k.moe_gemm.forward(
        &grouped, &xd, None, n, &idsd, &wd, &experts, &mut work, &mut out,
    )?;
    dev.sync()?;
    let got = dev.download(&out)?;
    let (index, sorted) = (dev.download(work.index())?, dev.download(work.sorted())?);
    let mut out_loop = poisoned(dev, n * d)?;
    let x_quant = match how {
        ExpertGemm::Int8 { x_quant, .. } => x_quant,
        ExpertGemm::Float => ActQuant::Q8_1,
    };
    let mut xq = dev.zeros(Quantize::q8_1_bytes(n, d))?;
    k.quantize.rows(&xd, n, d, x_quant, &mut xq)?;
    k.moe_gemm.forward(
        &how.with_grouped(false).with_index_one_block(false),
        &xd,
        Some(&xq),
        n,
        &idsd,
        &wd,
        &experts,
        &mut work,
        &mut out_loop,
    )?;
    dev.sync()?;
    let got_loop = dev.download(&out_loop)?;
    let (index_two, sorted_two) = (dev.download(work.index())?, dev.download(work.sorted())?);

    let (want_index, want_sorted) = host_index(&ids, e);
    let as_f32 = |v: &[i32]| v.iter().map(|&i| i as f32).collect::<Vec<_>>();
    let mut index_cmp = compare(
        &as_f32(&[&index[..], &sorted[..n * c.k]].concat()),
        &as_f32(&[&want_index[..], &want_sorted[..]].concat()),
        |_| 1.0,
    );
    index_cmp.2 &= index == want_index && sorted[..n * c.k] == want_sorted[..];
    index_cmp.2 &= index_two == want_index && sorted_two[..n * c.k] == want_sorted[..];

    let (want, scale) = cpu_moe(&c, &gq, &uq, &dq, &bias, &x, &ids, &weights)?;
    let shape = format!(
        "{n} tok × top-{} of {e} ({} live), {d}→{ff}→{d}",
        c.k, c.live
    );
    let oai = if c.oai { ", biases, swiglu_oai" } else { "" };
    let types = format!("{gate_up_ty} gate/up, {} down{oai}", c.down);
    let loop_cmp = compare(&got_loop, &got, |i| got[i].abs() as f64);
    let run = |how: ExpertGemm, work: &mut MoeWork| -> Result<Vec<f32>> {
        let mut out = poisoned(dev, n * d)?;
        k.moe_gemm
            .forward(&how, &xd, None, n, &idsd, &wd, &experts, work, &mut out)?;
        dev.sync()?;
        Ok(dev.download(&out)?)
    };
    let mma = mma_rows(
        plan, &experts, n, &mut work, run, &shape, &types, &want, &scale,
    )?;
    let mut rows = vec![
        row(
            "moe index (counts, offsets, tiles, sorted)",
            shape.clone(),
            "host counting sort",
            index_cmp,
            Contract::Exact,
        ),
        row(
            &format!("moe block grouped, {types}"),
            shape.clone(),
            "cpu per-expert matmul, swiglu",
            compare(&got, &want, |i| scale[i]),
            Contract::Rel(
                5e-3,
                "int8 x and h: Q8_1 here, Q8_K on the CPU; vs Σ_slot w·Σ|down·h|",
            ),
        ),
        row(
            &format!("moe block per-expert loop, {types}"),
            shape.clone(),
            "grouped path",
            loop_cmp,
            Contract::Exact,
        ),
    ];
    rows.extend(mma);
    // Long ubatches on Hopper: the f16 grouped GEMMs (FERROLM_GEMM_F16).
    if plan.f16_experts(&MoeShape::new(&experts, n)) {
        let mut run16 = |unpack: [bool; 2]| -> Result<Vec<f32>> {
            let mut bufs = ExpertBufs::zeros(dev, n, &experts, unpack)?;
            let mut out16 = poisoned(dev, n * d)?;
            k.gemm_wgmma.experts(
                &k.moe_gemm,
                &xd,
                n,
                &idsd,
                &wd,
                &experts,
                &mut work,
                &mut bufs,
                unpack,
                &mut out16,
            )?;
            dev.sync()?;
            Ok(dev.download(&out16)?)
        };
        let unpack = plan.f16_experts_unpack(&experts);
        let got16 = run16(unpack)?;
        if unpack.contains(&true) {
            // The weights the GEMM unpacks itself: the expanded path's bits.
            let expanded = run16([false; 2])?;
            rows.push(row(
                &format!("moe block f16 unpacked {unpack:?}, {types}"),
                shape.clone(),
                "expanded first",
                compare(&got16, &expanded, |_| 1.0),
                Contract::Exact,
            ));
        }
        rows.push(row(
            &format!("moe block f16 (wgmma), {types}"),
            shape,
            "cpu per-expert matmul, swiglu",
            compare(&got16, &want, |i| scale[i]),
            Contract::Rel(
                5e-3,
                "f16 x, weights and h here, Q8_K x and h on the CPU; vs Σ_slot w·Σ|down·h|",
            ),
        ));
    }
    Ok(rows)
}

/// Where the experts have the tensor-core mat-vec (`moe_mma.cu`), a batched step's rows: the
/// grouped GEMM in the per-sub-block order (a batched step's) against the CPU, and the
/// mat-vec with each column-tile count bit for bit against it (`run`: the forward under a
/// path, into fresh output).
#[allow(clippy::too_many_arguments)]
fn mma_rows(
    plan: &Plan,
    experts: &MoeExperts,
    n: usize,
    work: &mut MoeWork,
    run: impl Fn(ExpertGemm, &mut MoeWork) -> Result<Vec<f32>>,
    shape: &str,
    types: &str,
    want: &[f32],
    scale: &[f64],
) -> Result<Vec<Row>> {
    let tc = plan
        .for_sequence_batches()
        .expert_gemm(&MoeShape::new(experts, n))
        .with_grouped(true)
        .with_matvec_mma(None);
    let subs = matches!(
        tc,
        ExpertGemm::Int8 {
            gate_up: MmqOrder::Subs,
            down: MmqOrder::Subs,
            ..
        }
    );
    let takes = |ty, cols| MmvqMma::supports(ty, cols);
    if !subs
        || experts.gate.ty != experts.up.ty
        || !takes(experts.gate.ty, experts.n_embd())
        || !takes(experts.down.ty, experts.n_ff)
    {
        return Ok(Vec::new());
    }
    let gemm = run(tc, work)?;
    let mut rows = vec![row(
        &format!("moe block grouped, tensor-core order, {types}"),
        shape.to_owned(),
        "cpu per-expert matmul, swiglu",
        compare(&gemm, want, |i| scale[i]),
        Contract::Rel(
            5e-3,
            "int8 x and h: Q8_1 here, Q8_K on the CPU; vs Σ_slot w·Σ|down·h|",
        ),
    )];
    for tiles in MOE_MMA_TILES {
        let got = run(tc.with_matvec_mma(Some(tiles)), work)?;
        rows.push(row(
            &format!("moe_mma ({} pairs a pass), {types}", 8 * tiles),
            shape.to_owned(),
            "grouped GEMM, per-sub-block order",
            compare(&got, &gemm, |_| 1.0),
            Contract::Exact,
        ));
    }
    Ok(rows)
}

/// The decode kernels in slices of 8 tokens (the plan's path for these shapes) against the
/// CPU's per-expert loop, with the bound of the grouped GEMM's row.
pub fn moe_slices(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    c: MoeCase,
) -> Result<Vec<Row>> {
    let (n, e, d, ff) = (c.n, c.n_expert, c.n_embd, c.n_ff);
    let sigma = gate_up_sigma(&c);
    let gq = ferrolm_quant::quantize_to_vec(c.gate_up, &normal(rng, e * ff * d, sigma))?;
    let uq = ferrolm_quant::quantize_to_vec(c.gate_up, &normal(rng, e * ff * d, sigma))?;
    let dq = ferrolm_quant::quantize_to_vec(c.down, &normal(rng, e * d * ff, 0.05))?;
    let x = normal(rng, n * d, 1.0);
    let (ids, weights) = routes(rng, &c);
    let bias = biases(rng, &c);
    let bias_dev = upload_biases(dev, &bias)?;
    let gate = QuantMatrix::upload(dev, c.gate_up, e * ff, d, &gq)?;
    let up = QuantMatrix::upload(dev, c.gate_up, e * ff, d, &uq)?;
    let down = QuantMatrix::upload(dev, c.down, e * d, ff, &dq)?;
    let experts = MoeExperts {
        gate: &gate,
        up: &up,
        down: &down,
        n_expert: e,
        n_used: c.k,
        n_ff: ff,
        epilogue: epilogue(&c, &bias_dev),
    };
    // Widths the GEMM tiles take go to the grouped GEMM from 9 tokens: that path's rows.
    let how = match plan.moe(&MoeShape::new(&experts, n)) {
        MoePath::MatVecSlices(how) | MoePath::MatVec(how) => how,
        MoePath::Gemm(_) | MoePath::F16 => return moe_block(dev, k, plan, rng, c),
    };
    let mut xq = dev.zeros(Quantize::q8_1_bytes(n, d))?;
    k.quantize
        .rows(&dev.upload(&x)?, n, d, how.x_quant, &mut xq)?;
    let mut work = MoeDecodeWork::new(dev, 8, &experts)?;
    let mut slices = MoeSliceWork::new(dev, &experts)?;
    let (idsd, wd) = (dev.upload(&ids)?, dev.upload(&weights)?);
    let mut out = dev.upload(&vec![0f32; n * d])?;
    k.moe_decode.forward_slices(
        &how,
        &xq,
        n,
        &idsd,
        &wd,
        &experts,
        &mut work,
        &mut slices,
        &mut out,
    )?;
    dev.sync()?;
    let got = dev.download(&out)?;
    let (want, scale) = cpu_moe(&c, &gq, &uq, &dq, &bias, &x, &ids, &weights)?;
    Ok(vec![row(
        &format!(
            "moe decode in slices, {} gate/up, {} down{}",
            c.gate_up,
            c.down,
            if c.oai { ", biases, swiglu_oai" } else { "" }
        ),
        format!("{n} tok × top-{} of {e}, {d}→{ff}→{d}", c.k),
        "cpu per-expert matmul, swiglu",
        compare(&got, &want, |i| scale[i]),
        Contract::Rel(
            5e-3,
            "int8 x and h: Q8_1 here, Q8_K on the CPU for K-quants; vs Σ_slot w·Σ|down·h|",
        ),
    )])
}

/// The CPU's per-expert computation with the given routes, and per output element the scale
/// its error is measured against: `Σ_slot w · Σ_j |down[r][j] · h[j]|` (f64).
#[allow(clippy::too_many_arguments)]
fn cpu_moe(
    c: &MoeCase,
    gq: &[u8],
    uq: &[u8],
    dq: &[u8],
    bias: &[Vec<f32>; 3],
    x: &[f32],
    ids: &[i32],
    weights: &[f32],
) -> Result<(Vec<f32>, Vec<f64>)> {
    // The CPU side as the engine runs it (FERROLM_CPU_MATMUL, FERROLM_ATTN).
    let cpu_plan = CpuPlan::from_env()?;
    let (n, d, ff) = (c.n, c.n_embd, c.n_ff);
    let wref = |ty, data, rows, cols| WeightRef {
        ty,
        data,
        rows,
        cols,
    };
    let gate = wref(c.gate_up, gq, c.n_expert * ff, d);
    let up = wref(c.gate_up, uq, c.n_expert * ff, d);
    let down = wref(c.down, dq, c.n_expert * d, ff);
    let down_f = ferrolm_quant::dequantize_to_vec(c.down, dq, c.n_expert * d * ff)?;
    let (mut out, mut scale) = (vec![0f32; n * d], vec![0f64; n * d]);
    let mut slots = vec![0f32; n * c.k * d];
    for e in 0..c.n_expert {
        let pairs: Vec<usize> = (0..n * c.k).filter(|&p| ids[p] == e as i32).collect();
        if pairs.is_empty() {
            continue;
        }
        let m = pairs.len();
        let xe: Vec<f32> = pairs
            .iter()
            .flat_map(|&p| x[p / c.k * d..][..d].iter().copied())
            .collect();
        let (mut g, mut u) = (vec![0f32; m * ff], vec![0f32; m * ff]);
        // One token at a time, as ferrolm_cpu::moe (and llama.cpp) run expert matmuls.
        matmul_ordered(
            &cpu_plan,
            Order::Rows,
            &gate.slice_rows(e * ff, ff),
            &xe,
            &mut g,
        );
        matmul_ordered(
            &cpu_plan,
            Order::Rows,
            &up.slice_rows(e * ff, ff),
            &xe,
            &mut u,
        );
        // As ferrolm_cpu::moe: the biases join before the activation and the routing weight.
        if c.oai {
            add_bias(&mut g, &bias[0][e * ff..][..ff]);
            add_bias(&mut u, &bias[1][e * ff..][..ff]);
            swiglu_oai(&mut g, &u, OAI.0, OAI.1);
        } else {
            swiglu(&mut g, &u);
        }
        let mut y = vec![0f32; m * d];
        matmul_ordered(
            &cpu_plan,
            Order::Rows,
            &down.slice_rows(e * d, d),
            &g,
            &mut y,
        );
        if c.oai {
            add_bias(&mut y, &bias[2][e * d..][..d]);
        }
        let wd = &down_f[e * d * ff..][..d * ff];
        // [m][d] of Σ_j |down[r][j] · h[j]|.
        let mags: Vec<f64> = (0..m * d)
            .into_par_iter()
            .map(|i| {
                let (h, w) = (&g[i / d * ff..][..ff], &wd[i % d * ff..][..ff]);
                h.iter()
                    .zip(w)
                    .map(|(&a, &b)| (a as f64 * b as f64).abs())
                    .sum()
            })
            .collect();
        for (j, &p) in pairs.iter().enumerate() {
            let t = p / c.k;
            for r in 0..d {
                slots[p * d + r] = weights[p] * y[j * d + r];
                scale[t * d + r] += weights[p] as f64 * mags[j * d + r];
            }
        }
    }
    // Per token, the slots in order (ferrolm_cpu::moe, llama.cpp's per-slot adds).
    for (p, y) in slots.chunks_exact(d).enumerate() {
        for (o, &v) in out[p / c.k * d..][..d].iter_mut().zip(y) {
            *o += v;
        }
    }
    Ok((out, scale))
}

/// Preliminary timing of the whole grouped block at OLMoE-1B-7B's shape (64 experts, top-8,
/// 2048→1024→2048, Q4_K gate/up, Q6_K down) for 2048 tokens: TFLOP/s as 2·pairs·3·d·ff / time.
pub fn time_moe(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<()> {
    let c = MoeCase {
        n: 2048,
        n_expert: 64,
        k: 8,
        live: 64,
        n_embd: 2048,
        n_ff: 1024,
        gate_up: GgmlType::Q4K,
        down: GgmlType::Q6K,
        oai: false,
    };
    let (e, d, ff) = (c.n_expert, c.n_embd, c.n_ff);
    // 256 rows of real blocks, repeated: the kernels' speed does not depend on the values.
    let matrix = |rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize| {
        let bytes = rows * cols / ty.block_elems() * ty.block_bytes();
        let wq = ferrolm_quant::quantize_to_vec(ty, &normal(rng, 256 * cols, 1.0))?;
        let host: Vec<u8> = wq.iter().copied().cycle().take(bytes).collect();
        anyhow::Ok(QuantMatrix::upload(dev, ty, rows, cols, &host)?)
    };
    let gate = matrix(rng, GgmlType::Q4K, e * ff, d)?;
    let up = matrix(rng, GgmlType::Q4K, e * ff, d)?;
    let down = matrix(rng, c.down, e * d, ff)?;
    let experts = MoeExperts {
        gate: &gate,
        up: &up,
        down: &down,
        n_expert: e,
        n_used: c.k,
        n_ff: ff,
        epilogue: Default::default(),
    };
    let mut work = MoeWork::new(dev, c.n, &experts)?;
    let (ids, weights) = routes(rng, &c);
    let xd = dev.upload(&normal(rng, c.n * d, 1.0))?;
    let (idsd, wd) = (dev.upload(&ids)?, dev.upload(&weights)?);
    let mut out = poisoned(dev, c.n * d)?;
    println!(
        "\npreliminary moe_gemm timing ({} tok × top-{} of {e}, {d}→{ff}→{d}, Q4_K gate/up, Q6_K down):\n",
        c.n, c.k
    );
    println!("| path | ms / call | TFLOP/s |");
    println!("|---|---|---|");
    let how = plan.expert_gemm(&MoeShape::new(&experts, c.n));
    for grouped in [true, false] {
        let how = how.with_grouped(grouped);
        let mut call = || {
            k.moe_gemm.forward(
                &how, &xd, None, c.n, &idsd, &wd, &experts, &mut work, &mut out,
            )
        };
        call()?;
        let iters = 10;
        let ms = dev.time_ms(|| {
            for _ in 0..iters {
                call()?;
            }
            Ok(())
        })? / iters as f64;
        let flops = 2.0 * (c.n * c.k * 3 * d * ff) as f64;
        let name = if grouped {
            "grouped"
        } else {
            "per-expert loop"
        };
        println!("| {name} | {ms:.3} | {:.1} |", flops / (ms * 1e-3) / 1e12);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The expected index the GPU is held to: counting sort, stable within an expert.
    #[test]
    fn host_index_is_a_stable_counting_sort() {
        // 3 tokens × 2 slots over 4 experts; expert 2 empty.
        let ids = [3, 0, 0, 1, 3, 0];
        let (index, sorted) = host_index(&ids, 4);
        assert_eq!(&index[..4], &[3, 1, 0, 2], "counts");
        assert_eq!(&index[4..9], &[0, 3, 4, 4, 6], "offsets");
        assert_eq!(&index[9..], &[0, 1, 2, 2, 3], "tile starts");
        assert_eq!(sorted, [1, 2, 5, 3, 0, 4]);
        let many = vec![1i32; 130];
        let (index, _) = host_index(&many, 2);
        assert_eq!(&index[5..], &[0, 0, 3], "130 rows are 3 tiles of 64");
    }

    #[test]
    fn routes_pick_distinct_live_experts_with_unit_weights() {
        let mut rng = StdRng::seed_from_u64(7);
        let c = cases()[2];
        let (ids, w) = routes(&mut rng, &c);
        assert_eq!(ids.len(), c.n * c.k);
        for (t, slots) in ids.chunks_exact(c.k).enumerate() {
            let mut s = slots.to_vec();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), c.k, "token {t}: experts repeat");
            assert!(s.iter().all(|&e| (0..c.live as i32).contains(&e)));
            let sum: f32 = w[t * c.k..][..c.k].iter().sum();
            assert!((sum - 1.0).abs() < 1e-5);
        }
    }
}
