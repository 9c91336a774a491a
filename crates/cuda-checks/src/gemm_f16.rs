//! `cuda-parity` rows for the f16 warpgroup-MMA GEMM (`gemm_wgmma.cu`, Hopper only): the
//! weight expanded to f16, the activations rounded to f16, against the f64 product of the
//! dequantized weight and the f32 activations.

use super::checks::{exact_row, poisoned, row, same_bits, MatmulCase};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cuda::ops::{GemmWgmma, QuantMatrix};
use ferrolm_cuda::{CudaDevice, CudaError, CudaSlice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

/// Two f16 roundings of 2^-11 each a product (weight and activation), f32 sums: at most about
/// 9.8e-4 of `Σ|w·x|`.
pub(crate) const F16_OPERANDS: Contract =
    Contract::Rel(1e-3, "f16 weight and activation (2^-11 each), f32 sums");

/// (format, rows, cols, tokens): whole tiles; rows, tokens and columns that are not
/// (gpt-oss's 2880 is 45 stages of 64; 2080 ends on half a stage, filled with zeros by the copy
/// engine).
pub const F16_CASES: [(GgmlType, usize, usize, usize); 8] = [
    (GgmlType::Q4K, 4096, 4096, 512),
    (GgmlType::Q6K, 1024, 4096, 384),
    (GgmlType::Q4K, 1030, 1280, 300),
    (GgmlType::Q6K, 514, 2816, 257),
    (GgmlType::Q8_0, 2880, 2880, 300),
    (GgmlType::Q4_0, 770, 2080, 256),
    (GgmlType::Q8_0, 256, 4096, 2048),
    // SmolLM2-135M's 576-wide rows.
    (GgmlType::Q4_1, 1536, 576, 512),
];

/// `W · x` on the f16 GEMM; no rows where the device does not run it.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f16(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    if !plan.device().f16_gemm {
        return Ok(Vec::new());
    }
    let mut case = MatmulCase::new(dev, k, plan, rng, ty, rows, cols, n)?;
    let g = &k.gemm_wgmma;
    let xd = dev.upload(&case.x)?;
    let mut x16 = dev.zeros::<u16>(n * cols)?;
    let mut w16 = dev.zeros::<u16>(rows * cols)?;
    g.round_f16(&xd, n * cols, &mut x16)?;
    g.expand(&case.w, &mut w16)?;
    g.matmul(&x16, n, &w16, rows, cols, &mut case.out)?;
    dev.sync()?;
    let got = dev.download(&case.out)?;
    let exact = case.products()?;
    let want: Vec<f32> = exact.iter().map(|e| e.0 as f32).collect();
    let shape = format!("{rows}×{cols} · {n} rows");
    // A second launch on a poisoned output: the same bits (no order depends on timing).
    let mut again = poisoned(dev, n * rows)?;
    g.matmul(&x16, n, &w16, rows, cols, &mut again)?;
    dev.sync()?;
    let again = dev.download(&again)?;
    let mut rows_out = Vec::new();
    if GemmWgmma::unpacks(ty) {
        // Unpacked in the GEMM: the expanded path's bits.
        let mut unpacked = poisoned(dev, n * rows)?;
        g.matmul_unpacked(&x16, n, &case.w, &mut unpacked)?;
        dev.sync()?;
        let unpacked = dev.download(&unpacked)?;
        rows_out.push(row(
            &format!("gemm f16 {ty} unpacked in the GEMM"),
            shape.clone(),
            "expanded first",
            compare(&unpacked, &got, |_| 1.0),
            Contract::Exact,
        ));
    }
    let mut out = vec![
        row(
            &format!("gemm f16 {ty}"),
            shape.clone(),
            "f64 of dequantized w, f32 x",
            compare(&got, &want, |i| exact[i].1),
            F16_OPERANDS,
        ),
        row(
            &format!("gemm f16 {ty} (again)"),
            shape,
            "its first run",
            compare(&again, &got, |_| 1.0),
            Contract::Exact,
        ),
    ];
    out.extend(rows_out);
    Ok(out)
}

/// The two rows of a batched decode step's split f16 product: `launch` run twice on a poisoned
/// output of `outputs` floats, the first run against the f64 product (`want`, scaled by
/// `exact`'s magnitudes) within the f16 contract, the second against the first bit for bit.
fn split_run_rows(
    dev: &CudaDevice,
    name: &str,
    shape: String,
    want: &[f32],
    exact: &[(f64, f64)],
    outputs: usize,
    mut launch: impl FnMut(&mut CudaSlice<f32>) -> Result<(), CudaError>,
) -> Result<[Row; 2]> {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut got = poisoned(dev, outputs)?;
        launch(&mut got)?;
        dev.sync()?;
        runs.push(dev.download(&got)?);
    }
    Ok([
        row(
            name,
            shape.clone(),
            "f64 of dequantized w, f32 x",
            compare(&runs[0], want, |i| exact[i].1),
            F16_OPERANDS,
        ),
        row(
            &format!("{name} (again)"),
            shape,
            "its first run",
            compare(&runs[1], &runs[0], |_| 1.0),
            Contract::Exact,
        ),
    ])
}

/// (rows, cols, tokens) of a batched decode step's Q4_K products (the one format it takes) on
/// the unpacking decode GEMM (`matmul_decode`: f16 arithmetic) split over k: qwen3-8b's gate
/// and q at 64 sequences, its down at 64 (8 shares of 6 super-blocks) and 17, a row count that
/// is not whole tiles over 5 super-blocks (3 shares: 2, 2, 1), and the most tokens the kernel
/// takes.
pub const F16_DECODE_CASES: [(usize, usize, usize); 6] = [
    (12288, 4096, 64),
    (4096, 4096, 64),
    (4096, 12288, 64),
    (4096, 12288, 17),
    (1030, 1280, 40),
    (258, 2560, 64),
];

/// A batched decode step's `W · x` on the unpacking GEMM split over k as the plan splits it
/// (and in 3 shares), against the f64 product and against a second run; its deep variant
/// against it bit for bit, and two matrices of the shape (gate and up) in one launch against
/// each in its own, either variant.
pub fn gemm_f16_decode(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    let ty = GgmlType::Q4K;
    if !plan.device().f16_gemm {
        return Ok(Vec::new());
    }
    // The plan's shares where it takes the kernel, else 8 (a product it leaves to the
    // mat-vec, still the kernel's to get right).
    let ways = plan
        .for_sequence_batches()
        .f16_decode(ty, rows, cols, n)
        .unwrap_or(8)
        .min(cols / 256);
    let case = MatmulCase::new(dev, k, plan, rng, ty, rows, cols, n)?;
    let g = &k.gemm_wgmma;
    let xd = dev.upload(&case.x)?;
    let mut x16 = dev.zeros::<u16>(n * cols)?;
    g.round_f16(&xd, n * cols, &mut x16)?;
    let exact = case.products()?;
    let want: Vec<f32> = exact.iter().map(|e| e.0 as f32).collect();
    let mut out = Vec::new();
    for shares in [ways, 3] {
        let mut part = dev.zeros::<f32>(GemmWgmma::split_floats(shares, n, rows).max(1))?;
        out.extend(split_run_rows(
            dev,
            &format!("gemm f16 decode {ty} (f16 unpacking), split"),
            format!("{rows}×{cols} · {n} rows, {shares} shares"),
            &want,
            &exact,
            n * rows,
            |got| {
                let split = Some((shares, &mut part));
                g.matmul_decode(&x16, n, &[&case.w], &mut [got], split, false)
            },
        )?);
    }
    // A second matrix of the shape (up beside gate).
    let second = MatmulCase::new(dev, k, plan, rng, ty, rows, cols, n)?;
    let run = |ws: &[&QuantMatrix], shares: usize, deep: bool| {
        run_decode(dev, k, ws, &x16, n, shares, deep)
    };
    for shares in [ways, 3, 1] {
        let shape = format!("{rows}×{cols} · {n} rows, {shares} shares");
        // Each form's single-matrix run: the plain one, and the deep variant
        // (FERROLM_F16_DECODE_DEEP, three super-blocks in flight), which gives the plain one's
        // bits, split as the plan splits, in 3 shares and unsplit.
        let plain = run(&[&case.w], shares, false)?;
        let deep = run(&[&case.w], shares, true)?;
        out.push(exact_row(
            "gemm f16 decode Q4_K, three super-blocks in flight",
            shape.clone(),
            "one in flight",
            same_bits(&deep[0], &plain[0]).2,
        ));
        let forms = [(false, plain), (true, deep)];
        // Gate and up in one launch (FERROLM_F16_DECODE_PAIR), each form: each output the bits
        // of its own launch.
        for (d, first) in &forms {
            let alone = run(&[&second.w], shares, *d)?;
            let pair = run(&[&case.w, &second.w], shares, *d)?;
            let same = same_bits(&pair[0], &first[0]).2 && same_bits(&pair[1], &alone[0]).2;
            out.push(exact_row(
                &format!(
                    "gemm f16 decode {ty}, two matrices in one launch{}",
                    if *d { ", deep" } else { "" }
                ),
                shape.clone(),
                "each in its own launch",
                same,
            ));
        }
    }
    Ok(out)
}

/// `ws`' products (one matrix, or two of one shape in one launch) of the `n` f16 rows of
/// `x16` on the decode GEMM, split `shares` ways, into poisoned outputs (and a scratch where
/// split), downloaded once the device is done.
fn run_decode(
    dev: &CudaDevice,
    k: &Kernels,
    ws: &[&QuantMatrix],
    x16: &CudaSlice<u16>,
    n: usize,
    shares: usize,
    deep: bool,
) -> Result<Vec<Vec<f32>>> {
    let rows: usize = ws.iter().map(|w| w.rows).sum();
    let floats = GemmWgmma::split_floats(shares, n, rows);
    run_poisoned(dev, ws, n, floats, |outs, part| {
        let split = part.map(|p| (shares, p));
        k.gemm_wgmma.matmul_decode(x16, n, ws, outs, split, deep)
    })
}

/// `launch` into a poisoned output of `n` rows for each of `ws` and (where `floats` > 0) a
/// scratch of that many floats, the outputs downloaded once the device is done.
fn run_poisoned(
    dev: &CudaDevice,
    ws: &[&QuantMatrix],
    n: usize,
    floats: usize,
    launch: impl FnOnce(
        &mut [&mut CudaSlice<f32>],
        Option<&mut CudaSlice<f32>>,
    ) -> Result<(), CudaError>,
) -> Result<Vec<Vec<f32>>> {
    let mut part = dev.zeros::<f32>(floats.max(1))?;
    let mut gots = ws
        .iter()
        .map(|w| poisoned(dev, n * w.rows))
        .collect::<Result<Vec<_>>>()?;
    let mut outs: Vec<_> = gots.iter_mut().collect();
    launch(&mut outs, (floats > 0).then_some(&mut part))?;
    dev.sync()?;
    gots.iter()
        .map(|g| Ok(dev.download(g)?))
        .collect::<Result<Vec<_>>>()
}

/// (rows, cols, tokens) of a batched decode step's products on the f16 mat-vec (each in Q4_K and
/// Q6_K): qwen3-8b's gate, q and down at 64 and 17 sequences, rows that are not whole 128-row
/// blocks, one column tile (9 rows) and a single row.
pub const F16_MATVEC_CASES: [(usize, usize, usize); 7] = [
    (12288, 4096, 64),
    (4096, 4096, 64),
    (4096, 12288, 17),
    (1030, 1280, 40),
    (258, 2560, 64),
    (1027, 4096, 9),
    (1024, 4096, 1),
];

/// A batched decode step's `W · x` on the f16 mat-vec (`matvec_f16.cu`) unsplit, split as the
/// plan splits it under `FERROLM_F16_MATVEC=1` (8 shares where the plan would not take it)
/// and in 3 shares, against the f64 product and against a second run.
#[allow(clippy::too_many_arguments)]
pub fn matvec_f16(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    use ferrolm_cuda::ops::{MatVecF16, MatVecF16How, F16_MATVEC_CLUSTER_MAX};
    if !plan.device().f16_gemm {
        return Ok(Vec::new());
    }
    let ways = plan
        .for_sequence_batches()
        .f16_matvec(ty, rows, cols, n)
        .unwrap_or(8)
        .min(cols / 256);
    let case = MatmulCase::new(dev, k, plan, rng, ty, rows, cols, n)?;
    let xd = dev.upload(&case.x)?;
    let mut x16 = dev.zeros::<u16>(n * cols)?;
    k.gemm_wgmma.round_f16(&xd, n * cols, &mut x16)?;
    let exact = case.products()?;
    let want: Vec<f32> = exact.iter().map(|e| e.0 as f32).collect();
    let mut out = Vec::new();
    let regs = MatVecF16How::default();
    for shares in [1, ways, 3] {
        let mut part = dev.zeros::<f32>(MatVecF16::scratch(regs, shares, n, rows).max(1))?;
        out.extend(split_run_rows(
            dev,
            &format!("matvec f16 {ty}"),
            format!("{rows}×{cols} · {n} rows, {shares} shares"),
            &want,
            &exact,
            n * rows,
            |got| {
                let part = (shares > 1).then_some(&mut part);
                k.matvec_f16
                    .matmul(regs, shares, &case.w, &x16, n, got, part)
            },
        )?);
    }
    let run = |how, shares| -> Result<Vec<f32>> {
        let mut got = run_matvec_f16(dev, k, how, shares, &[&case.w], &x16, n)?;
        Ok(got.remove(0))
    };
    let same = |a: &[f32], b: &[f32]| same_bits(a, b).2;
    if k.matvec_f16.stages_weights(&case.w) {
        // The weights through shared memory (FERROLM_F16_MATVEC_Q6K_STAGE, on;
        // FERROLM_F16_MATVEC_Q4K_STAGE, off; only where the rows' layout allows, else both runs
        // would take the register path): its bits.
        let staged = MatVecF16How {
            stage_weights: true,
            ..regs
        };
        for shares in [1, ways] {
            let (a, b) = (run(regs, shares)?, run(staged, shares)?);
            out.push(exact_row(
                &format!("matvec f16 {ty}, weights through shared memory"),
                format!("{rows}×{cols} · {n} rows, {shares} shares"),
                "the register path",
                same(&a, &b),
            ));
        }
    }
    if plan.device().cc.0 >= 9 {
        // The shares added in a cluster a row block (FERROLM_F16_MATVEC_CLUSTER, off): its
        // bits against the scratch's, on the register path and (where the layout allows)
        // with the weights through shared memory.
        for stage_weights in [false, true] {
            if stage_weights && !k.matvec_f16.stages_weights(&case.w) {
                continue;
            }
            for shares in [ways, 3] {
                if !(2..=F16_MATVEC_CLUSTER_MAX).contains(&shares) {
                    continue;
                }
                let scratch = MatVecF16How {
                    stage_weights,
                    cluster_sum: false,
                };
                let cluster = MatVecF16How {
                    cluster_sum: true,
                    ..scratch
                };
                let (a, b) = (run(scratch, shares)?, run(cluster, shares)?);
                let path = if stage_weights { ", staged" } else { "" };
                out.push(exact_row(
                    &format!("matvec f16 {ty}, shares added in a cluster{path}"),
                    format!("{rows}×{cols} · {n} rows, {shares} shares"),
                    "the scratch's sum",
                    same(&a, &b),
                ));
            }
        }
    }
    Ok(out)
}

/// `ws`' products of the `n` f16 rows of `x16` in one f16 mat-vec launch (`matmul_many`; one
/// matrix: its own launch) as `how` says, split `shares` ways, into poisoned outputs (and a
/// scratch where the shares go through one), downloaded once the device is done.
#[allow(clippy::too_many_arguments)]
fn run_matvec_f16(
    dev: &CudaDevice,
    k: &Kernels,
    how: ferrolm_cuda::ops::MatVecF16How,
    shares: usize,
    ws: &[&ferrolm_cuda::ops::QuantMatrix],
    x16: &CudaSlice<u16>,
    n: usize,
) -> Result<Vec<Vec<f32>>> {
    use ferrolm_cuda::ops::MatVecF16;
    let rows = ws.iter().map(|w| w.rows).sum();
    let floats = MatVecF16::scratch(how, shares, n, rows);
    run_poisoned(dev, ws, n, floats, |outs, part| {
        k.matvec_f16
            .matmul_many(how, shares, ws, x16, n, outs, part)
    })
}

/// (rows of each matrix, cols, tokens) of products sharing one f16 mat-vec launch: qwen3-8b's
/// q, k and v at 64 sequences, and rows that are not whole 128-row blocks.
pub const F16_MATVEC_TOGETHER_CASES: [([usize; 3], usize, usize); 2] = [
    ([4096, 1024, 1024], 4096, 64),
    ([1030, 258, 1027], 1280, 40),
];

/// Three products on the same activations in one f16 mat-vec launch
/// (`FERROLM_F16_MATVEC_ONE`: `MatVecF16::matmul_many`), against each in its own launch split
/// the same ways (1, 3 and 8 shares; through the scratch and, on sm_90, in a cluster): the
/// same bits.
#[allow(clippy::too_many_arguments)]
pub fn matvec_f16_together(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ty: GgmlType,
    rows: [usize; 3],
    cols: usize,
    n: usize,
) -> Result<Vec<Row>> {
    use ferrolm_cuda::ops::MatVecF16How;
    if !plan.device().f16_gemm {
        return Ok(Vec::new());
    }
    let cases = rows
        .iter()
        .map(|&r| MatmulCase::new(dev, k, plan, rng, ty, r, cols, n))
        .collect::<Result<Vec<_>>>()?;
    let xd = dev.upload(&cases[0].x)?;
    let mut x16 = dev.zeros::<u16>(n * cols)?;
    k.gemm_wgmma.round_f16(&xd, n * cols, &mut x16)?;
    let mut out = Vec::new();
    let clusters = plan.device().cc.0 >= 9;
    let hows = [false, true]
        .into_iter()
        .filter(|&cluster_sum| !cluster_sum || clusters)
        .map(|cluster_sum| MatVecF16How {
            stage_weights: plan.f16_matvec_stage(ty),
            cluster_sum,
        });
    for how in hows {
        for shares in [1, 3, 8] {
            let mut apart = Vec::new();
            for c in &cases {
                apart.extend(run_matvec_f16(dev, k, how, shares, &[&c.w], &x16, n)?);
            }
            let ws: Vec<_> = cases.iter().map(|c| &c.w).collect();
            let together = run_matvec_f16(dev, k, how, shares, &ws, &x16, n)?;
            let same = together.iter().zip(&apart).all(|(g, a)| same_bits(g, a).2);
            let sum = if how.cluster_sum { ", cluster" } else { "" };
            out.push(exact_row(
                &format!("matvec f16 {ty}, q, k and v in one launch"),
                format!("{rows:?}×{cols} · {n} rows, {shares} shares{sum}"),
                "a launch each",
                same,
            ));
        }
    }
    Ok(out)
}

/// `cuda-parity --time`: the f16 GEMM on the layer shapes of `mmq_time`, each stage's median
/// (weight expansion, activation rounding, the GEMM), against the int8 GEMM's default.
pub fn time_gemm_f16(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<()> {
    use super::checks::normal;
    use super::mmq_time::{median_ms, tops, SHAPES, TOKENS, TYPES};
    use ferrolm_cuda::ops::{QuantMatrix, Q8_1_BLOCK_BYTES};
    if !plan.device().f16_gemm {
        println!("\nf16 wgmma GEMM: not on this device");
        return Ok(());
    }
    let g = &k.gemm_wgmma;
    println!("\nf16 wgmma GEMM, median ms of 7 launches (TFLOPS of the GEMM alone; int8 = mmq's default):\n");
    println!("| format | model | matrix | rows×cols | n | expand | round | gemm | TFLOPS | all f16 | unpacked | TFLOPS | int8 | int8 ÷ all f16 |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for ty in TYPES {
        for s in &SHAPES {
            let bytes = s.rows * s.cols / ty.block_elems() * ty.block_bytes();
            let wq = ferrolm_quant::quantize_to_vec(ty, &normal(rng, 256 * s.cols, 1.0))?;
            let host: Vec<u8> = wq.iter().copied().cycle().take(bytes).collect();
            let w = QuantMatrix::upload(dev, ty, s.rows, s.cols, &host)?;
            let mut w16 = dev.zeros::<u16>(s.rows * s.cols)?;
            for n in TOKENS {
                let xd = dev.upload(&normal(rng, n * s.cols, 1.0))?;
                let mut x16 = dev.zeros::<u16>(n * s.cols)?;
                let mut out = poisoned(dev, n * s.rows)?;
                let expand = median_ms(dev, || g.expand(&w, &mut w16))?;
                let round = median_ms(dev, || g.round_f16(&xd, n * s.cols, &mut x16))?;
                let gemm = median_ms(dev, || g.matmul(&x16, n, &w16, s.rows, s.cols, &mut out))?;
                let mut xq = dev.upload(&vec![0u8; n * s.cols / 32 * Q8_1_BLOCK_BYTES])?;
                k.quantize.q8_1(&xd, s.cols, &mut xq)?;
                let how = plan.gemm(ty, s.rows, s.cols, n);
                let mut scratch = dev.zeros::<f32>(how.scratch(n, s.rows).max(1))?;
                let int8 = median_ms(dev, || {
                    k.mmq.matmul(&how, &w, &xq, n, &mut out, Some(&mut scratch))
                })?;
                let all = expand + round + gemm;
                // Unpacked in the GEMM (Q4_K): no expansion.
                let (unpacked, unpacked_tops) = if GemmWgmma::unpacks(ty) {
                    let ms = median_ms(dev, || g.matmul_unpacked(&x16, n, &w, &mut out))?;
                    (
                        format!("{ms:.3}"),
                        format!("{:.0}", tops(s.rows, s.cols, n, ms)),
                    )
                } else {
                    ("-".into(), "-".into())
                };
                println!(
                    "| {ty} | {} | {} | {}×{} | {n} | {expand:.3} | {round:.3} | {gemm:.3} | {:.0} | {all:.3} | {unpacked} | {unpacked_tops} | {int8:.3} | {:.2} |",
                    s.model,
                    s.what,
                    s.rows,
                    s.cols,
                    tops(s.rows, s.cols, n, gemm),
                    int8 / all
                );
            }
        }
    }
    Ok(())
}
