//! f32 KV cache checks of `cuda-parity` (`--cache-type f32`, llama.cpp's `-ctk f32 -ctv f32`,
//! the F32 goldens' cache): the store against the rows it was given (bit-identical: a copy),
//! then every kernel that reads an f32 cache, against the CPU's attention over an f32 cache of
//! the same values (its f32 path, which the CPU takes for an f32 cache at every size):
//! - flash-decoding (a block per query head: the grouped kernel reads f16 only) with one split
//!   and with the plan's splits, its combine fused and on its own (the same bits);
//! - the scalar prefill and the CPU-order prefill (`attn_prefill_f32ref_f32_*`);
//!
//! with a sliding window, gpt-oss's sinks and deepseek2's `kq_scale` at their heads. Contracts:
//! the quantized caches' scalar kernels' ([`ATTN`]: f32 sums in another order, ≤ 3e-5 of
//! `Σ p·|v|`), and the CPU-order prefill's ([`ATTN_F32REF`]: only e^x rounds differently).

use super::attn_checks::{magnitudes_with, Softmax, ATTN, ATTN_F32REF};
use super::checks::{exact_row, normal, poisoned, row};
use super::{compare, Row};
use anyhow::{ensure, Result};
use ferrolm_cpu::attention::{attention, LayerKv};
use ferrolm_cpu::{CpuPlan, KvType};
use ferrolm_cuda::ops::{AttnSoftmax, DecodeKernel, DecodeWork, KvCache, KvFormat, PrefillKernel};
use ferrolm_cuda::plan::Attn;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_model::backend::AttnShape;
use rand::rngs::StdRng;

const REFERENCE: &str = "cpu attention, f32 cache";

/// What one case runs over its cache.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    /// Flash-decoding over one split, or over the plan's splits for the cache.
    Decode {
        one_split: bool,
    },
    Prefill(PrefillKernel),
}

const DECODES: [Run; 2] = [
    Run::Decode { one_split: true },
    Run::Decode { one_split: false },
];
const PREFILLS: [Run; 2] = [
    Run::Prefill(PrefillKernel::Scalar),
    Run::Prefill(PrefillKernel::F32Ref),
];

/// (query heads, KV heads, head size), cache size, cached + new positions, query rows.
type Case = ((usize, usize, usize), usize, usize, usize);

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let plain = Softmax::default();
    // Decode at depth (GQA 32/8, D 128), at 80 (a size no block cache holds), a few keys, and
    // at every other head size; the prefills from 0 and after a prefix, under and over the
    // CPU-order kernel's rows (REF_MAX_ROWS), at the small and the large head sizes.
    let decode: [Case; 6] = [
        ((32, 8, 128), 1024, 1000, 3),
        ((8, 8, 80), 640, 555, 2),
        ((4, 2, 64), 64, 5, 1),
        ((8, 4, 32), 512, 400, 1),
        ((16, 4, 96), 1024, 777, 2),
        ((8, 1, 256), 2048, 1500, 1),
    ];
    each(dev, k, plan, rng, &decode, &DECODES, plain, &mut rows)?;
    let prefill: [Case; 5] = [
        ((9, 3, 64), 128, 77, 77),
        ((8, 2, 128), 640, 600, 300),
        ((4, 2, 32), 128, 37, 37),
        ((6, 3, 80), 256, 240, 40),
        ((8, 2, 256), 512, 240, 40),
    ];
    each(dev, k, plan, rng, &prefill, &PREFILLS, plain, &mut rows)?;
    // A sliding window: decode past it, prefill across it.
    let window = Softmax::from(Some(100));
    let cases = [((32, 8, 128), 1024, 1000, 3)];
    each(dev, k, plan, rng, &cases, &DECODES, window, &mut rows)?;
    let cases = [((9, 3, 64), 256, 200, 150)];
    each(dev, k, plan, rng, &cases, &PREFILLS, window, &mut rows)?;
    // gpt-oss's heads (64 over 8 KV heads of 64) with its sinks, with and without its window
    // of 128: decode from a few keys to 8000, prefill from 0 and after a prefix.
    for window in [None, Some(128)] {
        let sinks = Softmax {
            window,
            sinks: true,
            kq_scale: None,
        };
        let decode = [((64, 8, 64), 64, 20, 1), ((64, 8, 64), 8192, 8000, 1)];
        each(dev, k, plan, rng, &decode, &DECODES, sinks, &mut rows)?;
        let prefill = [((64, 8, 64), 256, 77, 77), ((16, 2, 64), 640, 600, 300)];
        each(dev, k, plan, rng, &prefill, &PREFILLS, sinks, &mut rows)?;
    }
    // deepseek2's attention: 16 heads, each its own KV head, keys of 192, its factor.
    let scaled = Softmax {
        kq_scale: Some(0.1147),
        ..Softmax::default()
    };
    let decode = [((16, 16, 192), 4096, 4000, 1), ((16, 16, 192), 256, 30, 2)];
    each(dev, k, plan, rng, &decode, &DECODES, scaled, &mut rows)?;
    let prefill = [
        ((16, 16, 192), 512, 237, 37),
        ((16, 16, 192), 512, 300, 300),
    ];
    each(dev, k, plan, rng, &prefill, &PREFILLS, scaled, &mut rows)?;
    Ok(rows)
}

/// Runs `runs` on each case over `sm`.
#[allow(clippy::too_many_arguments)]
fn each(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    cases: &[Case],
    runs: &[Run],
    sm: Softmax,
    rows: &mut Vec<Row>,
) -> Result<()> {
    for &(shape, n_ctx, n_pos, n_q) in cases {
        rows.extend(check(
            dev, k, plan, rng, shape, n_ctx, n_pos, n_q, runs, sm,
        )?);
    }
    Ok(())
}

/// Stores `n_pos - n_q` positions into an f32 cache, then `n_q` more, and attends with the
/// last `n_q` as queries on each of `runs` (the plan's kernel for `n_q` rows among them).
#[allow(clippy::too_many_arguments)]
fn check(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    (n_head, n_kv_head, head_dim): (usize, usize, usize),
    n_ctx: usize,
    n_pos: usize,
    n_q: usize,
    runs: &[Run],
    sm: Softmax,
) -> Result<Vec<Row>> {
    let width = n_kv_head * head_dim;
    let (keys, values) = (
        normal(rng, n_pos * width, 1.0),
        normal(rng, n_pos * width, 1.0),
    );
    let mut cache = KvCache::new(dev, KvFormat::F32, n_ctx, n_kv_head, head_dim)?;
    ensure!(
        cache.k_rot.is_none() && cache.v_rot.is_none(),
        "f32 is not rotated"
    );
    let prefix = n_pos - n_q;
    for (from, to) in [(0, prefix), (prefix, n_pos)] {
        if from == to {
            continue;
        }
        let r = from * width..to * width;
        let (kd, vd, pos0) = (
            dev.upload(&keys[r.clone()])?,
            dev.upload(&values[r])?,
            dev.upload(&[from as u32])?,
        );
        k.attention.store(&mut cache, &kd, &vd, &pos0)?;
    }
    let shape_s = format!(
        "{n_head}/{n_kv_head} heads, d {head_dim}, {n_q} q at {prefix}..{}",
        sm.describe()
    );

    // The store: each head's rows as given, head-major [g][pos][d].
    let mut store_ok = true;
    let (got_k, got_v) = cache.read_back(dev)?;
    for (got, want) in [(got_k, &keys), (got_v, &values)] {
        for p in 0..n_pos {
            for g in 0..n_kv_head {
                let src = &want[p * width + g * head_dim..][..head_dim];
                let at = (g * n_ctx + p) * head_dim * 4;
                let bytes = &got[at..at + head_dim * 4];
                store_ok &= bytes
                    .chunks_exact(4)
                    .zip(src)
                    .all(|(b, x)| b == x.to_le_bytes());
            }
        }
    }
    let mut rows = vec![exact_row(
        "kv_store f32→f32",
        shape_s.clone(),
        "the rows stored",
        store_ok,
    )];

    // The CPU over an f32 cache of the same values: its f32 path at any ubatch size.
    let mut kv = LayerKv::new(KvType::F32, n_ctx, n_kv_head, head_dim);
    kv.store(0, &keys, &values);
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
        &CpuPlan::from_env()?,
        &q,
        &kv,
        &positions,
        shape,
        sm.window,
        sinks,
        &mut want,
    );
    let scale = magnitudes_with(&q, &keys, &values, &positions, shape, sm.window, sinks);
    let sinks_d = sinks.map(|s| dev.upload(s)).transpose()?;
    let dsm = AttnSoftmax {
        scale: shape.scale(),
        window: sm.window,
        sinks: sinks_d.as_ref(),
    };

    // The plan's kernel for these rows is one of the runs, and reads f32.
    let group = n_head / n_kv_head;
    let planned = match plan.attention(n_q, KvFormat::F32, group, head_dim) {
        Attn::Decode { kernel, .. } => {
            ensure!(
                kernel == DecodeKernel::Split,
                "the plan decodes an f32 cache by KV group"
            );
            runs.contains(&Run::Decode { one_split: false })
        }
        Attn::Prefill(kernel) => {
            kernel.reads(KvFormat::F32) && runs.contains(&Run::Prefill(kernel))
        }
    };
    ensure!(
        planned,
        "f32 cache, {n_q} rows: the plan's kernel is not checked here"
    );

    let (qd, pd) = (dev.upload(&q)?, dev.upload(&positions)?);
    for &run in runs {
        let mut out = poisoned(dev, q.len())?;
        let (op, contract, detail) = match run {
            Run::Decode { one_split } => {
                let cap = plan.decode_splits(n_ctx, n_kv_head);
                let splits = if one_split {
                    1
                } else {
                    plan.window_splits(cap, sm.window, n_kv_head)
                };
                let mut work = DecodeWork::new(dev, n_q, n_head, head_dim, cap)?;
                let fused = plan.fuse();
                k.attention.decode(
                    fused,
                    DecodeKernel::Split,
                    &qd,
                    None,
                    &cache,
                    &pd,
                    n_head,
                    dsm,
                    splits,
                    &mut work,
                    &mut out,
                    None,
                )?;
                let mut alone = poisoned(dev, q.len())?;
                k.attention.decode(
                    !fused,
                    DecodeKernel::Split,
                    &qd,
                    None,
                    &cache,
                    &pd,
                    n_head,
                    dsm,
                    splits,
                    &mut work,
                    &mut alone,
                    None,
                )?;
                dev.sync()?;
                let same = dev
                    .download(&alone)?
                    .iter()
                    .zip(&dev.download(&out)?)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                rows.push(exact_row(
                    "attn_decode f32 combine, fused / its own kernel",
                    format!("{shape_s}, {splits} splits"),
                    "the other combine",
                    same,
                ));
                (
                    "attn_decode f32 (split)",
                    ATTN,
                    format!(", {splits} splits"),
                )
            }
            Run::Prefill(kernel) => {
                k.attention
                    .prefill(kernel, &qd, &cache, &pd, n_head, dsm, &mut out)?;
                match kernel {
                    PrefillKernel::F32Ref => (
                        "attn_prefill f32 (cpu f32 order)",
                        ATTN_F32REF,
                        String::new(),
                    ),
                    _ => ("attn_prefill f32 (scalar)", ATTN, String::new()),
                }
            }
        };
        dev.sync()?;
        let got = dev.download(&out)?;
        rows.push(row(
            op,
            format!("{shape_s}{detail}"),
            REFERENCE,
            compare(&got, &want, |i| scale[i]),
            contract,
        ));
    }
    Ok(rows)
}
