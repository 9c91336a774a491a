//! `cuda-parity` rows for the tensor-core mat-vecs of batched decode steps (`mmvq_mma.cu`,
//! `mmvq_staged.cu`): against the CPU's matmul within the tensor-core contract, with one and
//! two 16-row tiles a warp and either way of reading Q8_K's scales (all the same bits); the
//! staged one also against `mmq` in its order, unsplit (the same bits).

use super::checks::{poisoned, row, MatmulCase, SAME_INT8};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cuda::ops::{ActQuant, MmqOrder, MmvqMma, MmvqStaged};
use ferrolm_cuda::plan::Gemm;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

/// Weight formats with the kernel.
pub const MMA_MV_TYPES: [GgmlType; 2] = [GgmlType::Q4K, GgmlType::Q6K];

/// The shapes checked: a full column tile, tiles with idle columns, rows that are not whole
/// 16- or 32-row tiles, and the widths of a batched step (qwen3-8b's 4096 and 12288).
pub const MMA_MV_CASES: [(usize, usize, usize); 5] = [
    (4096, 4096, 8),
    (1027, 4096, 2),
    (515, 12_288, 21),
    (1000, 2048, 40),
    (4096, 1024, 64),
];

/// `W · x` for `n` rows against the CPU's matmul, each way the kernel can run.
#[allow(clippy::too_many_arguments)]
pub fn mmvq_mma(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    // Activations quantized as a batched step's are (Q8_K for K-quants).
    let batched = plan.for_sequence_batches();
    let case = MatmulCase::new(dev, k, &batched, rng, ty, rows, cols, n)?;
    let q8k = batched.act_quant(ty, cols) == ActQuant::Q8K;
    let cpu = case.cpu()?;
    let exact = case.products()?;
    let shape = format!("{rows}×{cols} · {n} rows");
    let mut out_rows = Vec::new();
    let tiles: &[bool] = if MmvqMma::has_two_tiles(n) {
        &[false, true]
    } else {
        &[false]
    };
    let mut first: Option<Vec<f32>> = None;
    for &two in tiles {
        let mut runs = Vec::new();
        // Twice as the plan says (Q8_K's scale read once a super-block), then from every
        // block, as for Q8_1 activations: the same values, so the same bits each time.
        for q8k in [q8k, q8k, false] {
            let mut out = poisoned(dev, n * rows)?;
            k.mmvq_mma
                .matmul(two, q8k, &case.w, &case.xq, n, &mut out)?;
            dev.sync()?;
            runs.push(dev.download(&out)?);
        }
        let name = format!("mmvq_mma {ty} ({} rows a warp)", if two { 32 } else { 16 });
        out_rows.push(row(
            &name,
            shape.clone(),
            "cpu matmul::matmul",
            compare(&runs[0], &cpu, |i| exact[i].1),
            SAME_INT8,
        ));
        for (i, what) in [(1, "again"), (2, "scales a block")] {
            out_rows.push(row(
                &format!("{name} ({what})"),
                shape.clone(),
                "its first run",
                compare(&runs[i], &runs[0], |_| 1.0),
                Contract::Exact,
            ));
        }
        // Two row tiles a warp: the same sums in the same order as one.
        if let Some(one) = &first {
            out_rows.push(row(
                &format!("{name} (against 16 rows a warp)"),
                shape.clone(),
                "16 rows a warp",
                compare(&runs[0], one, |_| 1.0),
                Contract::Exact,
            ));
        }
        if first.is_none() {
            first = Some(runs.swap_remove(0));
        }
    }
    Ok(out_rows)
}

/// The staged mat-vec's shapes: 17-64 rows (column tiles 3-8, idle columns in the last),
/// weight rows that are not whole 128-row blocks, and qwen3-8b's widths (16 and 48
/// super-blocks, which the plan splits over k).
pub const STAGED_CASES: [(usize, usize, usize); 4] = [
    (4096, 4096, 64),
    (1027, 4096, 17),
    (515, 12_288, 40),
    (12_288, 4096, 33),
];

/// `mmvq_staged` for `n` rows in each order the format has (per sub-block; Q4_K over Q8_K
/// also the integer-scale blocks): unsplit against `mmq` in the same order (the same bits), in
/// 3 and 8 shares (at 16 super-blocks 8 shares of 2, as the plan splits qwen3-8b's q and o) against
/// the CPU's matmul (the tensor-core contract), and once more for the same bits every run.
#[allow(clippy::too_many_arguments)]
pub fn mmvq_staged(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    let batched = plan.for_sequence_batches();
    let case = MatmulCase::new(dev, k, &batched, rng, ty, rows, cols, n)?;
    let cpu = case.cpu()?;
    let exact = case.products()?;
    let blocks = batched.act_quant(ty, cols) == ActQuant::Q8K
        && MmvqStaged::supports(ty, cols, MmqOrder::Blocks);
    let orders: &[MmqOrder] = if blocks {
        &[MmqOrder::Subs, MmqOrder::Blocks]
    } else {
        &[MmqOrder::Subs]
    };
    let mut out_rows = Vec::new();
    for &order in orders {
        let shape = format!("{rows}×{cols} · {n} rows, {order:?}");
        let run = |splits: usize| -> Result<Vec<f32>> {
            let mut out = poisoned(dev, n * rows)?;
            let mut part = poisoned(dev, MmvqStaged::scratch(splits, n, rows).max(1))?;
            k.mmvq_staged.matmul(
                order,
                splits,
                &case.w,
                &case.xq,
                n,
                &mut out,
                Some(&mut part),
            )?;
            dev.sync()?;
            Ok(dev.download(&out)?)
        };
        let one = run(1)?;
        let mut want = poisoned(dev, n * rows)?;
        let gemm = Gemm::Tiles {
            tile: 0,
            launches: vec![(0, n, order)],
            splits: 1,
        };
        k.mmq.matmul(&gemm, &case.w, &case.xq, n, &mut want, None)?;
        dev.sync()?;
        let want = dev.download(&want)?;
        let name = format!("mmvq_staged {ty}");
        out_rows.push(row(
            &format!("{name} (one share)"),
            shape.clone(),
            "mmq in the same order",
            compare(&one, &want, |_| 1.0),
            Contract::Exact,
        ));
        for splits in [3, 8] {
            let got = run(splits)?;
            out_rows.push(row(
                &format!("{name} ({splits} shares)"),
                shape.clone(),
                "cpu matmul::matmul",
                compare(&got, &cpu, |i| exact[i].1),
                SAME_INT8,
            ));
            out_rows.push(row(
                &format!("{name} ({splits} shares, again)"),
                shape.clone(),
                "its first run",
                compare(&run(splits)?, &got, |_| 1.0),
                Contract::Exact,
            ));
        }
    }
    Ok(out_rows)
}
