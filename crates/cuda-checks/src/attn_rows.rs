//! `cuda-parity` checks of the batched decode attention (`attn_decode_rows_*` and
//! `kv_store_rows_f16`, one launch for several sequences through a rows table): sequences of
//! different cache sizes (so different split counts), lengths and row counts in one batch,
//! plus a row the launch does not serve, against
//! - the per-sequence path (`Attention::decode` as the backend runs a sequence alone: by KV
//!   group where it has the group size, else split), within f32 summation order;
//! - the CPU's attention over an f32 cache of the same f16-rounded keys and values (which also
//!   checks that each row's k and v were stored in its own cache at its position);
//! - the same row launched alone (a table of one row): the same bits, whatever shares the batch;
//! - zeros for the row not served;
//!
//! and, where the shape has them (4 or 8 heads a group of 64, 128 or 256), the same for the
//! tensor-core kernels (`attn_decode_rows_tc_*`).

use super::attn_checks::{magnitudes_with, Softmax, ATTN};
use super::checks::{exact_row, normal, poisoned, row};
use super::{compare, Row};
use anyhow::Result;
use ferrolm_cpu::attention::{attention, LayerKv};
use ferrolm_cpu::{CpuPlan, KvType};
use ferrolm_cuda::ops::{
    AttnSoftmax, DecodeKernel, DecodeWork, KvCache, KvFormat, RowSeq, RowsTable, ATTN_GROUPS,
};
use ferrolm_cuda::CudaSlice;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::AttnShape;
use rand::rngs::StdRng;

/// The layers each sequence's cache has; the checks attend in the last, so a wrong layer
/// offset in the table reads zeros.
const LAYERS: usize = 2;

/// One sequence of the batch: its cache size, the positions already cached, its new rows.
pub(crate) struct Seq {
    pub n_ctx: usize,
    pub cached: usize,
    pub rows: usize,
}

/// Five sequences (cache sizes 64 to 4096; 1 to 3001 keys, so 1 to 12 splits; one of two rows)
/// and one row no sequence owns, at each head shape: group sizes 1 to 8, every head size of
/// `ATTN_HEAD_DIMS` (32, 64, 80, 96, 128, 192, 256).
pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let seqs = [
        Seq {
            n_ctx: 64,
            cached: 0,
            rows: 1,
        },
        Seq {
            n_ctx: 4096,
            cached: 3000,
            rows: 1,
        },
        Seq {
            n_ctx: 256,
            cached: 37,
            rows: 2,
        },
        Seq {
            n_ctx: 1024,
            cached: 1022,
            rows: 1,
        },
        Seq {
            n_ctx: 512,
            cached: 130,
            rows: 1,
        },
    ];
    let mut rows = Vec::new();
    for shape in [
        (16, 16, 128),
        (9, 3, 64),
        (32, 8, 128),
        (32, 4, 128),
        (16, 8, 64),
        (8, 8, 80),
        (10, 2, 80),
        (12, 4, 96),
        (8, 4, 32),
        (14, 2, 32),
        (12, 2, 128),
        (32, 8, 64),
        (16, 2, 256),
        (6, 6, 256),
        (16, 16, 192),
        (8, 2, 192),
    ] {
        rows.extend(batch(dev, k, plan, rng, shape, &seqs, Softmax::default())?);
    }
    Ok(rows)
}

fn f16_round(x: &[f32]) -> Result<Vec<f32>> {
    let bits = ferrolm_quant::quantize_to_vec(GgmlType::F16, x)?;
    Ok(ferrolm_quant::dequantize_to_vec(
        GgmlType::F16,
        &bits,
        x.len(),
    )?)
}

/// One batch of `seqs` at one head shape, every row with the window, sinks and scale `sm`
/// gives.
pub(crate) fn batch(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    (n_head, n_kv_head, head_dim): (usize, usize, usize),
    seqs: &[Seq],
    sm: Softmax,
) -> Result<Vec<Row>> {
    let window = sm.window;
    let cpu_plan = CpuPlan::from_env()?;
    let width = n_kv_head * head_dim;
    let q_width = n_head * head_dim;
    let shape = AttnShape {
        n_head,
        n_kv_head,
        head_dim,
        kq_scale: sm.kq_scale,
    };
    let sinks = sm.sinks.then(|| normal(rng, n_head, 2.0));
    let sinks = sinks.as_deref();
    let sinks_d = sinks.map(|s| dev.upload(s)).transpose()?;
    let dsm = AttnSoftmax {
        scale: shape.scale(),
        window,
        sinks: sinks_d.as_ref(),
    };
    // Each sequence: caches, every position's k and v (cached and new), its decode work.
    let mut caches: Vec<Vec<KvCache>> = Vec::new();
    let mut works: Vec<DecodeWork> = Vec::new();
    let mut kvs: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
    for s in seqs {
        let n_pos = s.cached + s.rows;
        let (keys, values) = (
            normal(rng, n_pos * width, 1.0),
            normal(rng, n_pos * width, 1.0),
        );
        let mut layers = Vec::new();
        for _ in 0..LAYERS {
            layers.push(KvCache::new(
                dev,
                KvFormat::F16,
                s.n_ctx,
                n_kv_head,
                head_dim,
            )?);
        }
        if s.cached > 0 {
            let r = 0..s.cached * width;
            let (kd, vd) = (dev.upload(&keys[r.clone()])?, dev.upload(&values[r])?);
            k.attention
                .store(&mut layers[LAYERS - 1], &kd, &vd, &dev.upload(&[0u32])?)?;
        }
        caches.push(layers);
        let splits = plan.decode_splits(s.n_ctx, n_kv_head);
        works.push(DecodeWork::new(dev, s.rows, n_head, head_dim, splits)?);
        kvs.push((keys, values));
    }

    // The batch: each sequence's new rows in turn, then one row no sequence owns.
    let n_rows = seqs.iter().map(|s| s.rows).sum::<usize>() + 1;
    let (mut q, mut kb, mut vb, mut pos) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (s, (keys, values)) in seqs.iter().zip(&kvs) {
        let r = s.cached * width..(s.cached + s.rows) * width;
        kb.extend_from_slice(&keys[r.clone()]);
        vb.extend_from_slice(&values[r]);
        pos.extend((s.cached..s.cached + s.rows).map(|p| p as u32));
    }
    q.extend(normal(rng, n_rows * q_width, 1.0));
    kb.extend(normal(rng, width, 1.0));
    vb.extend(normal(rng, width, 1.0));
    pos.push(7);
    // Each row's splits as the backend picks them, from its own key count.
    let split_of =
        |t: usize, work: &DecodeWork| plan.rows_splits(pos[t] as usize + 1, work.n_split);
    let mut served: Vec<Option<RowSeq<'_>>> = Vec::new();
    for ((s, layers), work) in seqs.iter().zip(&caches).zip(&works) {
        for slot in 0..s.rows {
            let n_split = split_of(served.len(), work);
            served.push(Some(RowSeq {
                layers,
                work,
                slot,
                n_split,
            }));
        }
    }
    served.push(None);
    let grid = served
        .iter()
        .flatten()
        .map(|r| r.n_split)
        .max()
        .unwrap_or(1);
    let mut table = RowsTable::new(dev, LAYERS, n_rows, grid)?;
    table.write(dev.stream(), &served)?;
    drop(served);
    let (qd, kd, vd, pd) = (
        dev.upload(&q)?,
        dev.upload(&kb)?,
        dev.upload(&vb)?,
        dev.upload(&pos)?,
    );
    let a = &k.attention_rows;
    a.store(&table, LAYERS - 1, &kd, &vd, &pd, n_kv_head, head_dim)?;
    // The batch's rows, and each kernel's row alone (a table of one row), by the group kernels
    // and, where the shape has them, the tensor-core ones.
    let tc = DecodeKernel::has_tensor_cores(n_head / n_kv_head, head_dim);
    let decode = |tensor_cores: bool, table: &RowsTable, q: &CudaSlice<f32>, p, n| {
        let mut out = poisoned(dev, n * q_width)?;
        a.decode(
            tensor_cores,
            table,
            LAYERS - 1,
            q,
            p,
            n_head,
            n_kv_head,
            head_dim,
            dsm,
            &mut out,
        )?;
        dev.sync()?;
        anyhow::Ok(dev.download(&out)?)
    };
    let got = decode(false, &table, &qd, &pd, n_rows)?;
    let got_tc = tc
        .then(|| decode(true, &table, &qd, &pd, n_rows))
        .transpose()?;

    // The per-sequence path over the same caches (the batched store filled them), and the CPU.
    let group = n_head / n_kv_head;
    let grouped = ATTN_GROUPS.contains(&group);
    let (mut per_seq, mut want, mut scale) = (Vec::new(), Vec::new(), Vec::new());
    let mut row0 = 0;
    for ((s, layers), (keys, values)) in seqs.iter().zip(&caches).zip(&kvs) {
        let qs = &q[row0 * q_width..(row0 + s.rows) * q_width];
        let ps = &pos[row0..row0 + s.rows];
        let cap = plan.decode_splits(s.n_ctx, n_kv_head);
        let mut work = DecodeWork::new(dev, s.rows, n_head, head_dim, cap)?;
        let splits = plan.window_splits(cap, window, n_kv_head);
        let mut o = poisoned(dev, qs.len())?;
        let (qsd, psd) = (dev.upload(qs)?, dev.upload(ps)?);
        let cache = &layers[LAYERS - 1];
        let w = &mut work;
        let kernel = DecodeKernel::from_grouped(grouped);
        k.attention.decode(
            true, kernel, &qsd, None, cache, &psd, n_head, dsm, splits, w, &mut o, None,
        )?;
        per_seq.extend(dev.download(&o)?);
        let (kr, vr) = (f16_round(keys)?, f16_round(values)?);
        let mut kv = LayerKv::new(KvType::F32, s.n_ctx, n_kv_head, head_dim);
        kv.store(0, &kr, &vr);
        let mut w = vec![0f32; qs.len()];
        attention(&cpu_plan, qs, &kv, ps, shape, window, sinks, &mut w);
        want.extend(w);
        scale.extend(magnitudes_with(qs, &kr, &vr, ps, shape, window, sinks));
        row0 += s.rows;
    }
    let owned = row0 * q_width;
    let desc = format!(
        "{n_head}/{n_kv_head} heads, d {head_dim}, {} seqs ({} rows) + 1 unowned{}",
        seqs.len(),
        row0,
        sm.describe()
    );
    let mut rows = Vec::new();
    let reference = if grouped {
        "attn_decode_group, each seq alone"
    } else {
        "attn_decode_split, each seq alone"
    };
    rows.push(row(
        "attn_decode_rows",
        desc.clone(),
        reference,
        compare(&got[..owned], &per_seq, |i| scale[i]),
        ATTN,
    ));
    // The longest sequence's row (the most splits) launched alone: the same bits.
    let t = seqs[0].rows;
    let mut alone = RowsTable::new(dev, LAYERS, 1, split_of(t, &works[1]))?;
    let only = RowSeq {
        layers: &caches[1],
        work: &works[1],
        slot: 0,
        n_split: split_of(t, &works[1]),
    };
    alone.write(dev.stream(), &[Some(only)])?;
    let (q1, p1) = (
        dev.upload(&q[t * q_width..(t + 1) * q_width])?,
        dev.upload(&pos[t..t + 1])?,
    );
    let same_alone = |tensor_cores: bool, batch: &[f32]| -> Result<bool> {
        let o1 = decode(tensor_cores, &alone, &q1, &p1, 1)?;
        Ok(o1
            .iter()
            .zip(&batch[t * q_width..(t + 1) * q_width])
            .all(|(x, y)| x.to_bits() == y.to_bits()))
    };
    let same = same_alone(false, &got)?;
    rows.push(exact_row(
        "attn_decode_rows (a row alone)",
        desc.clone(),
        "the same row in the batch",
        same,
    ));
    rows.push(row(
        "attn_decode_rows",
        desc.clone(),
        "cpu attention, f32 cache of f16 values",
        compare(&got[..owned], &want, |i| scale[i]),
        ATTN,
    ));
    // The tensor-core kernels: against the same references, a row alone, and zeros.
    if let Some(got_tc) = &got_tc {
        let name = "attn_decode_rows (tensor cores)";
        rows.push(row(
            name,
            desc.clone(),
            reference,
            compare(&got_tc[..owned], &per_seq, |i| scale[i]),
            ATTN,
        ));
        rows.push(row(
            name,
            desc.clone(),
            "cpu attention, f32 cache of f16 values",
            compare(&got_tc[..owned], &want, |i| scale[i]),
            ATTN,
        ));
        let same = same_alone(true, got_tc)? && got_tc[owned..].iter().all(|&x| x == 0.0);
        rows.push(exact_row(
            "attn_decode_rows (tensor cores, a row alone; row not served)",
            desc.clone(),
            "the same row in the batch; zeros",
            same,
        ));
    }
    let zeros = got[owned..].iter().all(|&x| x == 0.0);
    rows.push(exact_row(
        "attn_decode_rows (row not served)",
        desc,
        "zeros",
        zeros,
    ));
    Ok(rows)
}
