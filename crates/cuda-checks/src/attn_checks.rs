//! Attention and embedding checks of `cuda-parity`: the f16 KV store, flash-decoding and both
//! prefill kernels (scalar f32 and f16 tensor-core) against `ferrolm_cpu::attention` (an f32
//! cache holding the same f16-rounded values, so both see identical keys and values and the
//! reference is the CPU's exact f32 path), and the embedding gather against `ferrolm_quant`'s
//! dequantize.

use super::checks::{exact_row, normal, poisoned, row};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cpu::attention::{attention, LayerKv};
use ferrolm_cpu::{CpuPlan, KvType};
use ferrolm_cuda::ops::{
    ActQuant, AttnSoftmax, DecodeKernel, DecodeWork, KvCache, KvFormat, PrefillKernel, QuantMatrix,
    Quantize, MMA_HEAD_DIMS,
};
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::AttnShape;
use rand::rngs::StdRng;
use rand::Rng;
use rayon::prelude::*;

/// f32 softmax and sums in another order (expf against Rust's exp, a split or tiled online
/// softmax against a two-pass one), measured against `Σ p·|v|` (see [`magnitudes`]). Most rows
/// sit near 5e-7; the scalar prefill over a q4_0 / q8_0 cache (9/3 heads, d 64, 77 rows)
/// reached 1.02e-5 and 1.89e-5 under seeds 141 and 143 (session 32), an exp of a score whose
/// f32 dot ran in another order; a wrong mask, row or split is off by O(0.1).
pub(crate) const ATTN: Contract = Contract::Rel(3e-5, "f32 accumulation order");

/// The tensor-core prefill rounds q·scale and the probabilities P to f16 (unit roundoff
/// u = 2⁻¹¹ ≈ 4.9e-4 each) and accumulates in f32, measured against `Σ p·|v|`. A numpy model
/// of exactly that rounding gives at most 5.3e-4 on these shapes' N(0, 1) data (rows with few
/// keys are the worst); a wrong mask or fragment is off by O(0.1).
const ATTN_MMA: Contract = Contract::Rel(2e-3, "f16 q·scale and P, f32 accumulation");

const F32_REF: &str = "cpu attention, f32 cache of f16 values";

/// The CPU's f32 arithmetic in its order: only e^x rounds differently (libm's expf there, the
/// correctly rounded value here), one ulp in a weight now and then.
pub(crate) const ATTN_F32REF: Contract = Contract::Rel(1e-6, "the CPU's order; e^x rounding");

/// What a check's softmax takes besides its keys, on both sides: a sliding window, gpt-oss's
/// sinks (random logits a query head, drawn by the check, N(0, 2): some above every score of
/// their row, some far below), a factor on `q·k` other than `1 / sqrt(head size)`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Softmax {
    pub window: Option<usize>,
    pub sinks: bool,
    pub kq_scale: Option<f32>,
}

impl From<Option<usize>> for Softmax {
    fn from(window: Option<usize>) -> Self {
        Self {
            window,
            ..Self::default()
        }
    }
}

impl Softmax {
    /// The rows' description of what is not the default.
    pub fn describe(&self) -> String {
        let mut d = self
            .window
            .map_or(String::new(), |w| format!(", window {w}"));
        if self.sinks {
            d += ", sinks";
        }
        if let Some(s) = self.kq_scale {
            d += &format!(", kq_scale {s}");
        }
        d
    }
}

/// What one attention check runs over the same cache and queries.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Path {
    /// Flash-decoding by `kernel` (skipped where the tensor-core one has no instance for the
    /// shape).
    Decode {
        kernel: DecodeKernel,
    },
    Prefill(PrefillKernel),
}

pub(crate) const DECODES: [Path; 3] = [
    Path::Decode {
        kernel: DecodeKernel::Split,
    },
    Path::Decode {
        kernel: DecodeKernel::Group,
    },
    Path::Decode {
        kernel: DecodeKernel::GroupTensorCores,
    },
];

pub(crate) const PREFILLS: [Path; 3] = [
    Path::Prefill(PrefillKernel::Scalar),
    Path::Prefill(PrefillKernel::Mma),
    Path::Prefill(PrefillKernel::F32Ref),
];

/// Decode: 32/8 heads of 128, 1000 cached positions, three query rows (997..=999). Prefill, on
/// both kernels: a 77-token prompt from position 0 with groups of 3 (the tensor-core kernel's
/// 64-row blocks then mix tokens and heads, and the last is ragged); 512 rows after a 300-token
/// prefix (GQA 32/8, D 128); 2048 rows after a 100-token prefix (GQA 32/8, D 64); a 2048-token
/// prompt with 32 heads of 128, one KV head each. Then every other head size ([`other_heads`]).
pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = attn(
        dev,
        k,
        plan,
        rng,
        (32, 8, 128),
        1024,
        1000,
        3,
        &DECODES,
        None,
    )?;
    // Decode by KV group at every group size it has, MHA to 8 heads a group, both head sizes.
    for (shape, n_ctx, n_pos) in [
        ((16, 16, 128), 4096, 4000),
        ((16, 8, 64), 300, 77),
        ((32, 4, 128), 20000, 16500),
        ((32, 8, 64), 2000, 1500),
    ] {
        rows.extend(attn(
            dev, k, plan, rng, shape, n_ctx, n_pos, 1, &DECODES, None,
        )?);
    }
    for (shape, n_ctx, n_pos, n_q) in [
        ((9, 3, 64), 128, 77, 77),
        ((32, 8, 128), 1024, 812, 512),
        ((32, 8, 64), 2304, 2148, 2048),
        ((32, 32, 128), 2048, 2048, 2048),
    ] {
        rows.extend(attn(
            dev, k, plan, rng, shape, n_ctx, n_pos, n_q, &PREFILLS, None,
        )?);
    }
    // Short ubatches on ggml's arithmetic: 37 rows from position 0 (the goldens' passes), and
    // 40 rows after a 200-token prefix with GQA.
    let f16ref = [Path::Prefill(PrefillKernel::F16Ref)];
    rows.extend(attn(
        dev,
        k,
        plan,
        rng,
        (4, 2, 64),
        128,
        37,
        37,
        &f16ref,
        None,
    )?);
    rows.extend(attn(
        dev,
        k,
        plan,
        rng,
        (32, 8, 128),
        512,
        240,
        40,
        &f16ref,
        None,
    )?);
    rows.extend(other_heads(dev, k, plan, rng)?);
    rows.extend(embed(dev, k, rng)?);
    rows.extend(super::kv_checks::all(dev, k, plan, rng)?);
    Ok(rows)
}

/// The head sizes past 64 and 128 (the tiny llama-family goldens' 32; 80, which is not whole
/// 32s a lane nor 64s a dot step; 96; deepseek2's 192; Gemma 3's 256), each on every kernel: decode split and by
/// KV group at group sizes 1, 2, 4 and 8 (up to 1000 cached keys, several splits); the prefills
/// on a 77-token prompt with groups of 3 and on 300 rows after a 300-token prefix (GQA 8/2);
/// ggml's arithmetic on 37 rows from 0 and 40 after a 200-token prefix. The tensor-core
/// prefill takes heads to 128 (`MMA_HEAD_DIMS`); at 192 and 256 the plan runs the scalar one.
fn other_heads(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for d in [32, 80, 96, 192, 256] {
        for ((n_head, n_kv_head), n_ctx, n_pos, n_q) in [
            ((16, 4), 1024, 1000, 3),
            ((8, 1), 640, 555, 1),
            ((6, 6), 300, 77, 2),
            ((8, 4), 128, 40, 1),
        ] {
            let shape = (n_head, n_kv_head, d);
            rows.extend(attn(
                dev, k, plan, rng, shape, n_ctx, n_pos, n_q, &DECODES, None,
            )?);
        }
        let prefills: Vec<Path> = PREFILLS
            .into_iter()
            .filter(|p| *p != Path::Prefill(PrefillKernel::Mma) || MMA_HEAD_DIMS.contains(&d))
            .collect();
        for (shape, n_ctx, n_pos, n_q) in [((9, 3, d), 128, 77, 77), ((8, 2, d), 640, 600, 300)] {
            rows.extend(attn(
                dev, k, plan, rng, shape, n_ctx, n_pos, n_q, &prefills, None,
            )?);
        }
        let f16ref = [Path::Prefill(PrefillKernel::F16Ref)];
        for (shape, n_ctx, n_pos, n_q) in [((4, 2, d), 128, 37, 37), ((8, 2, d), 512, 240, 40)] {
            rows.extend(attn(
                dev, k, plan, rng, shape, n_ctx, n_pos, n_q, &f16ref, None,
            )?);
        }
    }
    Ok(rows)
}

/// ggml's small-batch arithmetic against the CPU's reproduction of it: the same f16 roundings
/// and the same score order, except where an e^x one ulp apart (libm's expf on the CPU, the
/// correctly rounded value here) rounds the f16 accumulator the other way, a relative step of
/// 2^-11 at most.
const ATTN_GGML: Contract = Contract::Rel(1e-3, "ggml's f16 accumulator, e^x rounding");

fn f16_round(x: &[f32]) -> Result<Vec<f32>> {
    let bits = ferrolm_quant::quantize_to_vec(GgmlType::F16, x)?;
    Ok(ferrolm_quant::dequantize_to_vec(
        GgmlType::F16,
        &bits,
        x.len(),
    )?)
}

/// [`attn_with`] over a sliding `window` of positions where given, without sinks, scaled by
/// `1 / sqrt(head size)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attn(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    shape: (usize, usize, usize),
    n_ctx: usize,
    n_pos: usize,
    n_q: usize,
    paths: &[Path],
    window: Option<usize>,
) -> Result<Vec<Row>> {
    let sm = Softmax::from(window);
    attn_with(dev, k, plan, rng, shape, n_ctx, n_pos, n_q, paths, sm)
}

/// Stores `n_pos - n_q` positions (the prefix), then `n_q` more at the next position, and
/// attends with those last `n_q` as queries on each of `paths`, with the window, sinks and
/// scale `sm` gives (the CPU's too).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attn_with(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    (n_head, n_kv_head, head_dim): (usize, usize, usize),
    n_ctx: usize,
    n_pos: usize,
    n_q: usize,
    paths: &[Path],
    sm: Softmax,
) -> Result<Vec<Row>> {
    let window = sm.window;
    // The CPU side as the engine runs it (FERROLM_CPU_MATMUL, FERROLM_ATTN).
    let cpu_plan = CpuPlan::from_env()?;
    let width = n_kv_head * head_dim;
    let (keys, values) = (
        normal(rng, n_pos * width, 1.0),
        normal(rng, n_pos * width, 1.0),
    );
    let mut cache = KvCache::new(dev, KvFormat::F16, n_ctx, n_kv_head, head_dim)?;
    let prefix = n_pos - n_q;
    for (from, to) in [(0, prefix), (prefix, n_pos)] {
        if from == to {
            continue;
        }
        let rows = from * width..to * width;
        let (kd, vd, pos0) = (
            dev.upload(&keys[rows.clone()])?,
            dev.upload(&values[rows])?,
            dev.upload(&[from as u32])?,
        );
        k.attention.store(&mut cache, &kd, &vd, &pos0)?;
    }

    // The store: f16 bits, head-major, as ferrolm_quant rounds (round to nearest even).
    let (got_k, got_v) = cache.read_back(dev)?;
    let mut store_ok = true;
    for (g, want) in [(&got_k, &keys), (&got_v, &values)] {
        let want_bits = ferrolm_quant::quantize_to_vec(GgmlType::F16, want)?;
        for p in 0..n_pos {
            for h in 0..n_kv_head {
                for d in 0..head_dim {
                    let at = (p * n_kv_head + h) * head_dim + d;
                    let b = u16::from_le_bytes([want_bits[2 * at], want_bits[2 * at + 1]]);
                    let c = 2 * ((h * n_ctx + p) * head_dim + d);
                    store_ok &= u16::from_le_bytes([g[c], g[c + 1]]) == b;
                }
            }
        }
    }
    let mut rows = vec![exact_row(
        "kv_store f32→f16",
        format!("{prefix} + {n_q} rows of {n_kv_head}×{head_dim}"),
        "ferrolm_quant F16",
        store_ok,
    )];

    let (kr, vr) = (f16_round(&keys)?, f16_round(&values)?);
    let mut kv = LayerKv::new(KvType::F32, n_ctx, n_kv_head, head_dim);
    kv.store(0, &kr, &vr);
    let positions: Vec<u32> = (prefix..n_pos).map(|p| p as u32).collect();
    let q = normal(rng, n_q * n_head * head_dim, 1.0);
    let shape = AttnShape {
        n_head,
        n_kv_head,
        head_dim,
        kq_scale: sm.kq_scale,
    };
    let sinks = sm.sinks.then(|| normal(rng, n_head, 2.0));
    let sinks = sinks.as_deref();
    let mut want = vec![0f32; q.len()];
    attention(
        &cpu_plan, &q, &kv, &positions, shape, window, sinks, &mut want,
    );
    // The CPU takes ggml's small-batch arithmetic with an f16 cache (of the same values).
    let mut kv16 = LayerKv::new(KvType::F16, n_ctx, n_kv_head, head_dim);
    kv16.store(0, &kr, &vr);
    let mut want_ggml = vec![0f32; q.len()];
    attention(
        &cpu_plan,
        &q,
        &kv16,
        &positions,
        shape,
        window,
        sinks,
        &mut want_ggml,
    );
    let scale = magnitudes_with(&q, &kr, &vr, &positions, shape, window, sinks);
    let sinks_d = sinks.map(|s| dev.upload(s)).transpose()?;
    let dsm = AttnSoftmax {
        scale: shape.scale(),
        window,
        sinks: sinks_d.as_ref(),
    };

    let (qd, pd) = (dev.upload(&q)?, dev.upload(&positions)?);
    for &path in paths {
        let tc = Path::Decode {
            kernel: DecodeKernel::GroupTensorCores,
        };
        if path == tc && !DecodeKernel::has_tensor_cores(n_head / n_kv_head, head_dim) {
            continue;
        }
        let mut out = poisoned(dev, q.len())?;
        let (op, contract, reference, want) = match path {
            Path::Decode { kernel } => {
                let cap = plan.decode_splits(n_ctx, n_kv_head);
                let mut work = DecodeWork::new(dev, n_q, n_head, head_dim, cap)?;
                // The splits and the combine fused into the split kernel as the backend runs
                // them (the plan's).
                let splits = plan.window_splits(cap, window, n_kv_head);
                let fused = plan.fuse();
                let (w, ns) = (dsm, splits);
                k.attention.decode(
                    fused, kernel, &qd, None, &cache, &pd, n_head, w, ns, &mut work, &mut out, None,
                )?;
                // The combine kernel on its own (FERROLM_CUDA_FUSE=0) sums as the fused one.
                let mut alone = poisoned(dev, q.len())?;
                k.attention.decode(
                    !fused, kernel, &qd, None, &cache, &pd, n_head, w, ns, &mut work, &mut alone,
                    None,
                )?;
                dev.sync()?;
                let same = dev
                    .download(&alone)?
                    .iter()
                    .zip(&dev.download(&out)?)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                rows.push(exact_row(
                    "attn_decode combine, fused / its own kernel",
                    format!("{n_head}/{n_kv_head} heads, d {head_dim}, {splits} splits"),
                    "the other combine",
                    same,
                ));
                rows.extend(combine_q8k(
                    dev, k, &alone, kernel, &qd, &cache, &pd, n_head, w, ns, &mut work,
                )?);
                let op = match kernel {
                    DecodeKernel::Split => "attn_decode (split)",
                    DecodeKernel::Group => "attn_decode (by KV group)",
                    DecodeKernel::GroupTensorCores => "attn_decode (by KV group, tensor cores)",
                };
                (op, ATTN, F32_REF, &want)
            }
            Path::Prefill(kernel) => {
                k.attention
                    .prefill(kernel, &qd, &cache, &pd, n_head, dsm, &mut out)?;
                match kernel {
                    PrefillKernel::Scalar => ("attn_prefill (scalar)", ATTN, F32_REF, &want),
                    PrefillKernel::Mma => ("attn_prefill (f16 mma)", ATTN_MMA, F32_REF, &want),
                    PrefillKernel::F32Ref => {
                        ("attn_prefill (cpu f32 order)", ATTN_F32REF, F32_REF, &want)
                    }
                    PrefillKernel::F16Ref => (
                        "attn_prefill (ggml f16)",
                        ATTN_GGML,
                        "cpu attention, f16 cache (ggml's arithmetic)",
                        &want_ggml,
                    ),
                }
            }
        };
        dev.sync()?;
        let got = dev.download(&out)?;
        let win = sm.describe();
        rows.push(row(
            op,
            format!("{n_head}/{n_kv_head} heads, d {head_dim}, {n_q} q at {prefix}..{win}"),
            reference,
            compare(&got, want, |i| scale[i]),
            contract,
        ));
    }
    Ok(rows)
}

/// The own combine launch that quantizes its output too (`FERROLM_ATTN_COMBINE_Q8K`, where
/// the head size has it): bit for bit the floats of the plain combine (`alone`), and the codes
/// `quantize_q8_k` gives them. No row where the kernel does not take the shape.
#[allow(clippy::too_many_arguments)]
fn combine_q8k(
    dev: &CudaDevice,
    k: &Kernels,
    alone: &CudaSlice<f32>,
    kernel: DecodeKernel,
    q: &CudaSlice<f32>,
    cache: &KvCache,
    positions: &CudaSlice<u32>,
    n_head: usize,
    sm: AttnSoftmax<'_>,
    splits: usize,
    work: &mut DecodeWork,
) -> Result<Vec<Row>> {
    let width = n_head * cache.head_dim;
    let n_q = alone.len() / width;
    let bytes = Quantize::q8_1_bytes(n_q, width);
    let (mut got, mut got_q8) = (poisoned(dev, alone.len())?, dev.zeros::<u8>(bytes)?);
    let (c, pos) = (cache, positions);
    let wrote = k.attention.decode(
        false,
        kernel,
        q,
        None,
        c,
        pos,
        n_head,
        sm,
        splits,
        work,
        &mut got,
        Some(&mut got_q8),
    )?;
    if !wrote {
        return Ok(Vec::new());
    }
    let mut want_q8 = dev.zeros::<u8>(bytes)?;
    k.quantize
        .rows(alone, n_q, width, ActQuant::Q8K, &mut want_q8)?;
    dev.sync()?;
    let floats = dev
        .download(&got)?
        .iter()
        .zip(&dev.download(alone)?)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    let codes = dev.download(&got_q8)? == dev.download(&want_q8)?;
    let same = floats && codes;
    Ok(vec![exact_row(
        "attn_decode combine + Q8_K / combine, quantize_q8_k",
        format!(
            "{n_head}/{} heads, d {}, {splits} splits, {n_q} q",
            cache.n_kv_head, cache.head_dim
        ),
        "the plain combine and quantize_q8_k",
        same,
    )])
}

/// `--time`: both prefill kernels on a 2048-token causal prompt, 32 heads (one KV head each),
/// D 64 and 128. FLOPs: 2·D for q·k and 2·D for p·v per (row, head, visible key).
pub fn time_prefill(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<()> {
    let (n_q, n_head) = (2048, 32);
    println!("\nprefill attention timing ({n_q} causal rows from position 0, {n_head} heads):\n");
    println!("| d | kernel | ms / call | TFLOP/s |");
    println!("|---|---|---|---|");
    for head_dim in [64, 128] {
        let width = n_head * head_dim;
        let mut cache = KvCache::new(dev, KvFormat::F16, n_q, n_head, head_dim)?;
        let (kd, vd, pos0) = (
            dev.upload(&normal(rng, n_q * width, 1.0))?,
            dev.upload(&normal(rng, n_q * width, 1.0))?,
            dev.upload(&[0u32])?,
        );
        k.attention.store(&mut cache, &kd, &vd, &pos0)?;
        let qd = dev.upload(&normal(rng, n_q * width, 1.0))?;
        let positions: Vec<u32> = (0..n_q as u32).collect();
        let pd = dev.upload(&positions)?;
        let mut out = poisoned(dev, n_q * width)?;
        let flops = 4.0 * (head_dim * n_head) as f64 * (n_q * (n_q + 1) / 2) as f64;
        let plain = AttnSoftmax::plain(head_dim, None);
        for kernel in [PrefillKernel::Scalar, PrefillKernel::Mma] {
            let run = |out: &mut _| {
                k.attention
                    .prefill(kernel, &qd, &cache, &pd, n_head, plain, out)
            };
            run(&mut out)?;
            let iters = 20;
            let ms = dev.time_ms(|| {
                for _ in 0..iters {
                    run(&mut out)?;
                }
                Ok(())
            })? / iters as f64;
            let tflops = flops / (ms * 1e-3) / 1e12;
            println!("| {head_dim} | {kernel:?} | {ms:.3} | {tflops:.1} |");
        }
    }
    Ok(())
}

/// [`magnitudes_with`] without sinks.
pub(crate) fn magnitudes(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    positions: &[u32],
    shape: AttnShape,
    window: Option<usize>,
) -> Vec<f64> {
    magnitudes_with(q, k, v, positions, shape, window, None)
}

/// For each output element, `Σ_k p_k·|v_k[d]|` in f64 over the keys the row sees (its
/// `window`'s, or all), with the row's sink in the softmax where given: the magnitude its
/// rounding error grows with (the output itself may cancel to near zero), as `Σ|x·w|` for dot
/// products.
pub(crate) fn magnitudes_with(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    positions: &[u32],
    shape: AttnShape,
    window: Option<usize>,
    sinks: Option<&[f32]>,
) -> Vec<f64> {
    let AttnShape {
        n_head,
        n_kv_head,
        head_dim,
        ..
    } = shape;
    let (width, group) = (n_kv_head * head_dim, n_head / n_kv_head);
    let scale = f64::from(shape.scale());
    let mut out = vec![0f64; q.len()];
    out.par_chunks_exact_mut(head_dim)
        .enumerate()
        .for_each(|(i, o)| {
            let (t, h) = (i / n_head, i % n_head);
            let g = h / group;
            let qh = &q[i * head_dim..][..head_dim];
            let n_keys = positions[t] as usize + 1;
            let first = window.map_or(0, |w| n_keys.saturating_sub(w));
            let at = |p: usize| p * width + g * head_dim;
            let s: Vec<f64> = (first..n_keys)
                .map(|p| {
                    let kh = &k[at(p)..][..head_dim];
                    qh.iter()
                        .zip(kh)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let sink = sinks.map(|x| f64::from(x[h]));
            let m = s
                .iter()
                .cloned()
                .chain(sink)
                .fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
            let sum: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |x| (x - m).exp());
            for (p, &w) in (first..).zip(&e) {
                for (od, &vv) in o.iter_mut().zip(&v[at(p)..][..head_dim]) {
                    *od += w / sum * (vv as f64).abs();
                }
            }
        });
    out
}

fn embed(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let (vocab, cols) = (300, 512);
    let table = normal(rng, vocab * cols, 0.5);
    let ids: Vec<u32> = (0..17).map(|_| rng.gen_range(0..vocab as u32)).collect();
    let idd = dev.upload(&ids)?;
    let mut rows = Vec::new();
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
    ] {
        let bytes = ferrolm_quant::quantize_to_vec(ty, &table)?;
        let row_bytes = bytes.len() / vocab;
        let m = QuantMatrix::upload(dev, ty, vocab, cols, &bytes)?;
        let mut out = poisoned(dev, ids.len() * cols)?;
        k.embed.gather(&m, &idd, &mut out)?;
        dev.sync()?;
        let got = dev.download(&out)?;
        let mut want = Vec::with_capacity(got.len());
        for &id in &ids {
            let r = &bytes[id as usize * row_bytes..][..row_bytes];
            want.extend(ferrolm_quant::dequantize_to_vec(ty, r, cols)?);
        }
        let mut cmp = compare(&got, &want, |i| want[i].abs() as f64);
        cmp.2 &= got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        rows.push(row(
            &format!("embed {ty}"),
            format!("{} ids of {vocab}×{cols}", ids.len()),
            "ferrolm_quant dequantize",
            cmp,
            Contract::Exact,
        ));
    }
    Ok(rows)
}
