//! `cuda-parity` rows and timing for the prefill GEMM (`mmq.cu`): many activation rows on the
//! int8 tensor cores, against the CPU's `matmul`.

use super::checks::{poisoned, row, MatmulCase};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cuda::ops::{MMQ_BK, MMQ_TILES};
use ferrolm_cuda::plan::Gemm;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

/// Weight formats with a CUDA GEMM.
pub const MMQ_TYPES: [GgmlType; 9] = [
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Mxfp4,
];

/// `W · x` for `n` activation rows against the CPU's matmul; errors relative to `Σ|w·x|`.
#[allow(clippy::too_many_arguments)]
pub fn mmq(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    let mut case = MatmulCase::new(dev, k, plan, rng, ty, rows, cols, n)?;
    let how = plan.gemm(ty, rows, cols, n);
    let mut scratch = dev.zeros::<f32>(how.scratch(n, rows).max(1))?;
    k.mmq.matmul(
        &how,
        &case.w,
        &case.xq,
        n,
        &mut case.out,
        Some(&mut scratch),
    )?;
    dev.sync()?;
    let got = dev.download(&case.out)?;

    let cpu = case.cpu()?;
    let exact = case.products()?;
    let (w, xq) = (&case.w, &case.xq);
    let cmp = compare(&got, &cpu, |i| exact[i].1);
    // Under 256 rows Q4_K with Q8_K activations follows the CPU's integer-scale order, Q8_0 and
    // Q5_0 its eight lanes (unless FERROLM_CUDA_INT_SCALES / FERROLM_CUDA_Q8_0_LANES say
    // otherwise).
    // Rows not a multiple of 256 take the CUDA-core kernels, in the CPU's order too: the
    // CPU's bits.
    // Rows not a multiple of 256 in short ubatches likewise (longer ones take the tiles, the
    // last k step partly zero).
    let small = how == Gemm::Small;
    let contract = if plan.integer_scales(ty, cols, n) || small {
        Contract::Exact
    } else {
        super::checks::SAME_INT8
    };
    let auto = plan.tile(ty, rows, cols, n);
    let mut out_rows = vec![row(
        &format!("mmq {ty} (tile {})", MMQ_TILES[auto].name),
        format!("{rows}×{cols} · {n} rows"),
        "cpu matmul::matmul",
        cmp,
        contract,
    )];
    // Every tile shape adds each output's terms in the same order: the same bits.
    for (i, t) in MMQ_TILES.iter().enumerate() {
        let mut out_t = poisoned(dev, n * rows)?;
        k.mmq.matmul(
            &how.clone().with_tile(i),
            w,
            xq,
            n,
            &mut out_t,
            Some(&mut scratch),
        )?;
        dev.sync()?;
        let got_t = dev.download(&out_t)?;
        out_rows.push(row(
            &format!("mmq {ty} tile {}", t.name),
            format!("{rows}×{cols} · {n} rows"),
            "mmq, auto tile",
            compare(&got_t, &got, |_| 1.0),
            Contract::Exact,
        ));
    }
    out_rows.extend(split_k(dev, k, plan, &case, &cpu, &exact, rows, cols, n)?);
    Ok(out_rows)
}

/// The tensor-core GEMM (a batched step's order) with k split four ways (split-K,
/// `FERROLM_MMQ_SPLIT_K`): against the CPU within the tensor-core contract, and twice, the
/// same bits (each tile's shares are added in split order, whichever finishes first; the
/// counters reset themselves for the second launch).
#[allow(clippy::too_many_arguments)]
fn split_k(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    case: &MatmulCase,
    cpu: &[f32],
    exact: &[(f64, f64)],
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    let ways = cols.div_ceil(MMQ_BK).min(4);
    let how = plan.for_sequence_batches().gemm(case.ty, rows, cols, n);
    if how == Gemm::Small || ways < 2 {
        return Ok(Vec::new());
    }
    let how = how.with_splits(ways);
    let mut scratch = dev.zeros::<f32>(how.scratch(n, rows))?;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut out = poisoned(dev, n * rows)?;
        k.mmq
            .matmul(&how, &case.w, &case.xq, n, &mut out, Some(&mut scratch))?;
        dev.sync()?;
        runs.push(dev.download(&out)?);
    }
    let shape = format!("{rows}×{cols} · {n} rows");
    Ok(vec![
        row(
            &format!("mmq {} split-k {ways}", case.ty),
            shape.clone(),
            "cpu matmul::matmul",
            compare(&runs[0], cpu, |i| exact[i].1),
            super::checks::SAME_INT8,
        ),
        row(
            &format!("mmq {} split-k {ways} (again)", case.ty),
            shape,
            "its first run",
            compare(&runs[1], &runs[0], |_| 1.0),
            Contract::Exact,
        ),
    ])
}
