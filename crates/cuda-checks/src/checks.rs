//! The checks behind `cuda-parity`, one function per op: random inputs, the CUDA op on
//! NaN-poisoned outputs, the CPU op (or an f64 evaluation), and a [`Row`].

use super::{compare, elementwise, Contract, Row};
use anyhow::Result;
use ferrolm_cpu::matmul::{dot_f32_avx512_order, matmul, WeightRef};
use ferrolm_cpu::{norm, rope, CpuPlan};
use ferrolm_cuda::ops::{
    dequantize_blocks, rope_table_len, ActQuant, QuantMatrix, Rope, RopeArgs, RopeScale,
    Q8_1_BLOCK_BYTES,
};
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::{Rope as ModelRope, RopeMode};
use ferrolm_model::rope::{RopeScaling, RopeScalingKind};
use ferrolm_quant::BlockQ8_1;
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;

/// Weight formats with a CUDA mat-vec, in the table's order (a test holds this and the other
/// lists of checked formats to `ferrolm_cuda::ops::formats`).
const MMVQ_TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Mxfp4,
];

/// Weight formats with a CUDA-core GEMM, in the order the results list them.
const SMALL_GEMM_TYPES: [GgmlType; 6] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Mxfp4,
];

/// Runs every check; one that errors (a launch failure, say) becomes a failing row, and the
/// rest still run.
pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut push = |name: &str, r: Result<Vec<Row>>| match r {
        Ok(v) => rows.extend(v),
        Err(e) => rows.push(Row {
            op: format!("{name}: error: {e:#}"),
            shape: "-".into(),
            reference: "-",
            max_abs: f64::NAN,
            max_rel: f64::NAN,
            contract: Contract::Exact,
            clean: false,
        }),
    };
    push("quantize_q8_1", quantize_q8_1(dev, k, rng));
    push("rms_norm", rms_norm(dev, k, rng));
    push("rope", rope_both(dev, k, rng));
    push("rope_store", super::rope_store::all(dev, k, rng));
    push("mmvq_triple", super::mmvq_triple::all(dev, k, plan, rng));
    push("norm_matvec", super::norm_matvec::all(dev, k, plan, rng));
    push("elementwise", elementwise::elementwise(dev, k, rng));
    push("f16_copies", super::f16_copies::all(dev, k, rng));
    push("greedy", super::greedy::all(dev, k, rng));
    push("l2 ahead", super::l2_ahead::all(dev, k, rng));
    push("gemm_f32", gemm_f32(dev, k, rng));
    for ty in MMVQ_TYPES {
        push("mmvq", mmvq(dev, k, plan, rng, ty, 4096, 4096, 1));
        // Several activation rows and an odd row count (the kernel's two-row blocks).
        push("mmvq", mmvq(dev, k, plan, rng, ty, 1027, 2048, 3));
    }
    for ty in super::mmq::MMQ_TYPES {
        push(
            "mmq",
            super::mmq::mmq(dev, k, plan, rng, ty, 4096, 4096, 512),
        );
        // Rows and tokens that are not multiples of any tile; the second with several token
        // tiles of every shape.
        push(
            "mmq",
            super::mmq::mmq(dev, k, plan, rng, ty, 1027, 2048, 77),
        );
        push(
            "mmq",
            super::mmq::mmq(dev, k, plan, rng, ty, 515, 2048, 201),
        );
    }
    for (ty, rows, cols, n) in super::gemm_f16::F16_CASES {
        push(
            "gemm_f16",
            super::gemm_f16::gemm_f16(dev, k, plan, rng, ty, rows, cols, n),
        );
    }
    for (rows, cols, n) in super::gemm_f16::F16_DECODE_CASES {
        push(
            "gemm_f16",
            super::gemm_f16::gemm_f16_decode(dev, k, plan, rng, rows, cols, n),
        );
    }
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        for (rows, cols, n) in super::gemm_f16::F16_MATVEC_CASES {
            push(
                "matvec_f16",
                super::gemm_f16::matvec_f16(dev, k, plan, rng, ty, rows, cols, n),
            );
        }
        for (rows, cols, n) in super::gemm_f16::F16_MATVEC_TOGETHER_CASES {
            push(
                "matvec_f16",
                super::gemm_f16::matvec_f16_together(dev, k, plan, rng, ty, rows, cols, n),
            );
        }
    }
    for ty in super::mmvq_mma::MMA_MV_TYPES {
        for (rows, cols, n) in super::mmvq_mma::MMA_MV_CASES {
            push(
                "mmvq_mma",
                super::mmvq_mma::mmvq_mma(dev, k, plan, rng, ty, rows, cols, n),
            );
        }
        for (rows, cols, n) in super::mmvq_mma::STAGED_CASES {
            push(
                "mmvq_staged",
                super::mmvq_mma::mmvq_staged(dev, k, plan, rng, ty, rows, cols, n),
            );
        }
    }
    // Rows of 576 (SmolLM2-135M's width): the CUDA-core kernels, in the CPU's order.
    for ty in SMALL_GEMM_TYPES {
        push("mmq", super::mmq::mmq(dev, k, plan, rng, ty, 1027, 576, 77));
    }
    // Qwen2.5-0.5B's 896 and the shape-space goldens' 96-wide rows (Q5_0/Q5_1 there).
    for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
        push(
            "mmq",
            super::mmq::mmq(dev, k, plan, rng, ty, 4864, 896, 300),
        );
        push("mmq", super::mmq::mmq(dev, k, plan, rng, ty, 200, 96, 9));
    }
    // gpt-oss's 2880-wide rows: MXFP4 on its CUDA-core chain.
    let gpt_oss = super::mmq::mmq(dev, k, plan, rng, GgmlType::Mxfp4, 1027, 2880, 77);
    push("mmq", gpt_oss);
    // Rows that are not whole k steps on the tiles (long ubatches), the last step partly zero:
    // gpt-oss's 2880 (Q8_0 attention, MXFP4; rows 4-byte aligned only) and SmolLM2's 576.
    for (ty, cols) in [
        (GgmlType::Q8_0, 2880),
        (GgmlType::Mxfp4, 2880),
        (GgmlType::Q4_0, 2880),
        (GgmlType::Q4_1, 576),
    ] {
        push(
            "mmq",
            super::mmq::mmq(dev, k, plan, rng, ty, 1027, cols, 300),
        );
    }
    // Q4_K's integer-scale order: pairs for 20 tokens and blocks for the last 2; blocks only.
    push(
        "mmq",
        super::mmq::mmq(dev, k, plan, rng, GgmlType::Q4K, 256, 1024, 22),
    );
    push(
        "mmq",
        super::mmq::mmq(dev, k, plan, rng, GgmlType::Q4K, 256, 1024, 3),
    );
    for case in super::moe::cases() {
        push("moe_gemm", super::moe::moe_block(dev, k, plan, rng, case));
    }
    for case in super::moe::slice_cases() {
        push(
            "moe_slices",
            super::moe::moe_slices(dev, k, plan, rng, case),
        );
    }
    push("attention", super::attn_checks::all(dev, k, plan, rng));
    push("attention", super::attn_rows::all(dev, k, plan, rng));
    push(
        "attention window",
        super::window_checks::all(dev, k, plan, rng),
    );
    push(
        "attention softmax",
        super::softmax_checks::all(dev, k, plan, rng),
    );
    push(
        "attention f32 cache",
        super::f32kv_checks::all(dev, k, plan, rng),
    );
    push("moe", super::moe_decode::all(dev, k, plan, rng));
    push("norm route", super::norm_route::all(dev, k, plan, rng));
    push("norm exact", super::norm_exact::all(dev, k, plan, rng));
    push("attn rope", super::attn_rope::all(dev, k, plan, rng));
    Ok(rows)
}

pub(super) fn normal(rng: &mut StdRng, n: usize, sigma: f32) -> Vec<f32> {
    let d = Normal::new(0.0, sigma).expect("sigma > 0");
    (0..n).map(|_| d.sample(rng)).collect()
}

/// An output buffer full of NaN: an element no kernel wrote fails the check.
pub(super) fn poisoned(dev: &CudaDevice, n: usize) -> Result<CudaSlice<f32>> {
    Ok(dev.upload(&vec![f32::NAN; n])?)
}

/// A row whose contract is the same bits: `same` says whether they were.
pub(super) fn exact_row(op: &str, shape: String, reference: &'static str, same: bool) -> Row {
    let miss = if same { 0.0 } else { f64::NAN };
    row(op, shape, reference, (miss, 0.0, same), Contract::Exact)
}

pub(super) fn row(
    op: &str,
    shape: String,
    reference: &'static str,
    cmp: (f64, f64, bool),
    contract: Contract,
) -> Row {
    Row {
        op: op.into(),
        shape,
        reference,
        max_abs: cmp.0,
        max_rel: cmp.1,
        contract,
        clean: cmp.2,
    }
}

/// Against the CPU's matmul, which quantizes activations to the same partner format: the
/// codes and scales agree, so only the f32 order of the scale products differs (Q8_0 on the
/// CPU for 32-element formats has Q8_1's codes and scale).
pub(crate) const SAME_INT8: Contract = Contract::Rel(
    1e-5,
    "same int8 activations (Q8_K for K-quants), f32 sum order",
);

/// Both activation quantizers against ferrolm-quant's (the CPU matmul's) Q8_1 and Q8_K, code
/// for code and scale for scale.
fn quantize_q8_1(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let (n, cols) = (4, 4096);
    let mut x = normal(rng, n * cols, 1.0);
    // Rows of very different magnitude, an all-zero block (d = 0), a lone outlier, and a tie
    // of magnitudes with opposite signs (Q8_K takes the first).
    for (r, row) in x.chunks_exact_mut(cols).enumerate() {
        let s = 10f32.powi(r as i32 - 2);
        row.iter_mut().for_each(|v| *v *= s);
    }
    x[64..96].iter_mut().for_each(|v| *v = 0.0);
    x[200] = 1e4;
    x[300] = -50.0;
    x[301] = 50.0;
    let xd = dev.upload(&x)?;
    let mut rows = Vec::new();
    for mode in [ActQuant::Q8_1, ActQuant::Q8K] {
        let mut yd = dev.upload(&vec![0xA5u8; n * cols / 32 * Q8_1_BLOCK_BYTES])?;
        k.quantize.rows(&xd, n, cols, mode, &mut yd)?;
        dev.sync()?;
        let got = dev.download(&yd)?;
        // The expected blocks: the CPU's codes, its scale as an f32.
        let want = match mode {
            // The CPU matmul's Q8_0/Q8_1 activations: ggml's x86 quantizer.
            ActQuant::Q8_1 => x
                .chunks_exact(32)
                .flat_map(|c| {
                    let b = BlockQ8_1::quantize_x86(c.try_into().expect("whole blocks"));
                    b.d().to_le_bytes().into_iter().chain(b.qs)
                })
                .collect::<Vec<u8>>(),
            // BlockQ8K: f32 d, 256 codes, 16 sums.
            ActQuant::Q8K => ferrolm_quant::quantize_to_vec(GgmlType::Q8K, &x)?
                .chunks_exact(4 + 256 + 32)
                .flat_map(|b| {
                    let d = [b[0], b[1], b[2], b[3]];
                    b[4..260]
                        .chunks_exact(32)
                        .flat_map(move |q| d.into_iter().chain(q.iter().copied()))
                })
                .collect(),
        };
        let (gd, wd) = (dequantize_blocks(&got), dequantize_blocks(&want));
        let mut cmp = compare(&gd, &wd, |i| wd[i].abs() as f64);
        cmp.2 &= got == want; // every byte
        rows.push(row(
            &format!("quantize f32→{mode:?}"),
            format!("{n}×{cols}"),
            "ferrolm_quant",
            cmp,
            Contract::Exact,
        ));
    }
    Ok(rows)
}

fn rms_norm(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    // f64 sums of squares in another order can move the f32 mean by one ulp in rare cases.
    let contract = Contract::Rel(2.4e-7, "f64 sum order: ≤ 2 ulp");
    let eps = 1e-5;
    let (n, d) = (4, 4096);
    let x = normal(rng, n * d, 2.0);
    let w: Vec<f32> = normal(rng, d, 0.2).iter().map(|v| 1.0 + v).collect();
    let (xd, wd) = (dev.upload(&x)?, dev.upload(&w)?);
    let mut out = poisoned(dev, n * d)?;
    k.norm_rope.rms_norm(&xd, &wd, eps, &mut out)?;
    dev.sync()?;
    let got = dev.download(&out)?;
    let mut want = vec![0f32; n * d];
    norm::rms_norm(&x, &w, eps, &mut want);
    let full = compare(&got, &want, |i| want[i].abs() as f64);

    // Per-head norms (qwen3's q/k norms): 32 heads of 128, in place.
    let hd = 128;
    let x = normal(rng, n * 32 * hd, 2.0);
    let w = normal(rng, hd, 1.0);
    let (mut xd, wd) = (dev.upload(&x)?, dev.upload(&w)?);
    k.norm_rope.rms_norm_groups(&mut xd, &wd, eps)?;
    dev.sync()?;
    let got = dev.download(&xd)?;
    let mut want = x;
    norm::rms_norm_inplace(&mut want, &w, eps);
    let groups = compare(&got, &want, |i| want[i].abs() as f64);
    Ok(vec![
        row(
            "rms_norm",
            format!("{n}×{d}"),
            "cpu norm::rms_norm",
            full,
            contract,
        ),
        row(
            "rms_norm per head, in place",
            format!("{n}×32×{hd}"),
            "cpu norm::rms_norm_inplace",
            groups,
            contract,
        ),
    ])
}

fn rope_both(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let (n, heads, hd) = (7, 32, 128);
    let width = heads * hd;
    // llama3-like frequency divisors (1..8) and YaRN ×4 from a 4096-position original context.
    let factors: Vec<f32> = (0..hd / 2).map(|_| rng.gen_range(1.0..8.0)).collect();
    let yarn = RopeScaling {
        kind: RopeScalingKind::Yarn,
        factor: 4.0,
        n_ctx_orig: Some(4096),
        ..RopeScaling::default()
    };
    let mut rows = Vec::new();
    for (mode, base, scaled, name) in [
        (RopeMode::Normal, 10_000.0f32, false, "rope normal"),
        (RopeMode::Neox, 1_000_000.0, false, "rope neox"),
        (
            RopeMode::Normal,
            500_000.0,
            true,
            "rope normal, factors + yarn",
        ),
        (
            RopeMode::Neox,
            1_000_000.0,
            true,
            "rope neox, factors + yarn",
        ),
    ] {
        let x = normal(rng, n * width, 1.0);
        let mut pos: Vec<u32> = (0..n).map(|_| rng.gen_range(0..32_768)).collect();
        pos[0] = 0;
        let (mut xd, pd) = (dev.upload(&x)?, dev.upload(&pos)?);
        let model_rope = if scaled {
            yarn.params(mode, base, hd, 16_384)
        } else {
            ModelRope::plain(mode, base)
        };
        let ff = scaled.then_some(&factors[..]);
        let ffd = ff.map(|f| dev.upload(f)).transpose()?;
        let args = RopeArgs {
            base,
            mode: match mode {
                RopeMode::Normal => Rope::Normal,
                RopeMode::Neox => Rope::Neox,
            },
            scale: RopeScale {
                freq_scale: model_rope.freq_scale,
                ext_factor: model_rope.ext_factor,
                mscale: model_rope.magnitude(),
                corr_low: model_rope.corr_dims[0],
                corr_high: model_rope.corr_dims[1],
            },
            factors: ffd.as_ref(),
            table: None,
        };
        k.norm_rope.rope(&mut xd, hd, &pd, &args)?;
        // The same rotation reading a table of the pass's angles: the same bits.
        let mut table = dev.upload(&vec![0u32; rope_table_len(n, hd)])?;
        k.norm_rope.rope_table(&mut table, hd, &pd, &args)?;
        let mut xt = dev.upload(&x)?;
        let with_table = RopeArgs {
            table: Some(&table),
            ..args
        };
        k.norm_rope.rope(&mut xt, hd, &pd, &with_table)?;
        dev.sync()?;
        let got = dev.download(&xd)?;
        let same = dev
            .download(&xt)?
            .iter()
            .zip(&got)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        rows.push(exact_row(
            &format!("{name}, from a table"),
            format!("{n}×{heads}×{hd}"),
            "the same rotation computing its angles",
            same,
        ));
        let mut want = x.clone();
        rope::rope(&mut want, hd, &pos, &model_rope, ff);
        // A rotation keeps each pair's norm (times the magnitude): errors are measured against it.
        let partner = |i: usize| {
            let h = i % hd;
            let p = match mode {
                RopeMode::Normal => h ^ 1,
                RopeMode::Neox => (h + hd / 2) % hd,
            };
            i - h + p
        };
        let cmp = compare(&got, &want, |i| (x[i] as f64).hypot(x[partner(i)] as f64));
        rows.push(row(
            name,
            format!("{n}×{heads}×{hd}, pos < 32768"),
            "cpu rope::rope",
            cmp,
            Contract::Rel(1e-6, "cosf/sinf within 2 ulp"),
        ));
    }
    Ok(rows)
}

/// `[n][rows]` of (`Σ w·x`, `Σ |w·x|`) in f64 for weights `w` (`rows` × `cols`) and the rows
/// of `x`: the exact product, and the magnitude matmul errors are measured against.
pub(super) fn products(w: &[f32], x: &[f32], rows: usize, cols: usize) -> Vec<(f64, f64)> {
    (0..x.len() / cols * rows)
        .into_par_iter()
        .map(|i| {
            let (j, r) = (i / rows, i % rows);
            let (wr, xr) = (&w[r * cols..][..cols], &x[j * cols..][..cols]);
            wr.iter().zip(xr).fold((0.0, 0.0), |(s, m), (&a, &b)| {
                let p = a as f64 * b as f64;
                (s + p, m + p.abs())
            })
        })
        .collect()
}

/// The f32 GEMM against the CPU's f32 dot in its AVX-512 order (`dot_f32_avx512_order`), bit
/// for bit, on a wide shape, a router's (64 rows), one token, and odd shapes with a tail past
/// the last 64 columns, in each block layout (1-4 warps along the tokens); and against the
/// CPU's float matmul as this machine runs it (another order where the CPU has no AVX-512).
fn gemm_f32(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    // The CPU side as the engine runs it (FERROLM_CPU_MATMUL, FERROLM_ATTN).
    let cpu_plan = CpuPlan::from_env()?;
    let mut rows = Vec::new();
    for (nrows, cols, n) in [
        (4096, 1024, 512),
        (64, 2048, 512),
        (512, 2880, 1),
        (37, 2050, 13),
        (5, 59, 3),
    ] {
        let w = normal(rng, nrows * cols, 1.0);
        let x = normal(rng, n * cols, 1.0);
        let wd = dev.upload(&w)?;
        let xd = dev.upload(&x)?;
        // Each block layout (1-4 warps along the tokens, FERROLM_GEMM_F32_TOKEN_WARPS); the
        // default's (4) also against the CPU's float matmul.
        let mut runs = Vec::new();
        for token_warps in 1..=4 {
            let mut out = poisoned(dev, n * nrows)?;
            k.gemm_f32
                .matmul_raw(&wd, nrows, cols, &xd, n, &mut out, token_warps)?;
            dev.sync()?;
            runs.push((token_warps, dev.download(&out)?));
        }
        let ordered: Vec<f32> = (0..n * nrows)
            .into_par_iter()
            .map(|i| {
                let (t, r) = (i / nrows, i % nrows);
                dot_f32_avx512_order(&w[r * cols..][..cols], &x[t * cols..][..cols])
            })
            .collect();
        let mut want = vec![0f32; n * nrows];
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let wr = WeightRef {
            ty: GgmlType::F32,
            data: &bytes,
            rows: nrows,
            cols,
        };
        matmul(&cpu_plan, &wr, &x, &mut want);
        let exact = products(&w, &x, nrows, cols);
        let shape = format!("{nrows}×{cols} · {n} rows");
        let widest = &runs.last().expect("four layouts run").1;
        for (token_warps, got) in &runs {
            rows.push(row(
                "gemm_f32",
                format!("{shape}, {token_warps} token warps a block"),
                "the CPU's AVX-512 f32 dot order",
                same_bits(got, &ordered),
                Contract::Exact,
            ));
        }
        rows.push(row(
            "gemm_f32",
            shape,
            "cpu matmul::matmul (F32) on this CPU",
            compare(widest, &want, |i| exact[i].1),
            Contract::Rel(1e-6, "f32 sum order where this CPU has no AVX-512"),
        ));
    }
    Ok(rows)
}

/// [`compare`], and not clean where any two values differ in their bits (a signed zero, a NaN).
pub(super) fn same_bits(got: &[f32], want: &[f32]) -> (f64, f64, bool) {
    let (a, r, clean) = compare(got, want, |_| 1.0);
    let bits = got
        .iter()
        .zip(want)
        .all(|(g, w)| g.to_bits() == w.to_bits());
    (a, r, clean && bits)
}

/// A matmul check's operands: a random `rows × cols` weight of `ty` (its blocks on the host
/// and on the device) and `n` random activation rows, quantized on the device as the backend
/// quantizes them for this weight (the partner format llama.cpp's CPU uses: Q8_K for K-quants),
/// and a poisoned output.
pub struct MatmulCase {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub wq: Vec<u8>,
    pub x: Vec<f32>,
    pub w: QuantMatrix,
    pub xq: CudaSlice<u8>,
    pub out: CudaSlice<f32>,
}

impl MatmulCase {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &CudaDevice,
        k: &Kernels,
        plan: &Plan,
        rng: &mut StdRng,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        n: usize,
    ) -> Result<Self> {
        let wq = ferrolm_quant::quantize_to_vec(ty, &normal(rng, rows * cols, 1.0))?;
        let x = normal(rng, n * cols, 1.0);
        let w = QuantMatrix::upload(dev, ty, rows, cols, &wq)?;
        let xd = dev.upload(&x)?;
        let mut xq = dev.upload(&vec![0u8; n * cols / 32 * Q8_1_BLOCK_BYTES])?;
        k.quantize
            .rows(&xd, n, cols, plan.act_quant(ty, cols), &mut xq)?;
        Ok(Self {
            ty,
            rows,
            cols,
            wq,
            x,
            w,
            xq,
            out: poisoned(dev, n * rows)?,
        })
    }

    /// The CPU's matmul of the same weight and activations, as the engine runs it
    /// (`FERROLM_CPU_MATMUL`, `FERROLM_ATTN`).
    /// [`products`] of the dequantized weights and the f32 activations.
    pub fn products(&self) -> Result<Vec<(f64, f64)>> {
        let wf = ferrolm_quant::dequantize_to_vec(self.ty, &self.wq, self.rows * self.cols)?;
        Ok(products(&wf, &self.x, self.rows, self.cols))
    }

    pub fn cpu(&self) -> Result<Vec<f32>> {
        let mut cpu = vec![0f32; self.x.len() / self.cols * self.rows];
        let wr = WeightRef {
            ty: self.ty,
            data: &self.wq,
            rows: self.rows,
            cols: self.cols,
        };
        matmul(&CpuPlan::from_env()?, &wr, &self.x, &mut cpu);
        Ok(cpu)
    }
}

/// `W · x` for `n` activation rows: against the f64 product of the very operands the kernel
/// saw (the dequantized weights and the Q8_1 activations it read back), and for one row
/// against the CPU's matmul.
#[allow(clippy::too_many_arguments)]
fn mmvq(
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
    let (w, wq) = (&case.w, &case.wq);
    k.mmvq
        .matvec(plan.matvec_wide(ty), w, &case.xq, n, &mut case.out, None)?;
    dev.sync()?;
    let got = dev.download(&case.out)?;
    let xq = dev.download(&case.xq)?;

    let wf = ferrolm_quant::dequantize_to_vec(ty, wq, rows * cols)?;
    let xf = dequantize_blocks(&xq);
    let exact = products(&wf, &xf, rows, cols);
    let want: Vec<f32> = exact.iter().map(|e| e.0 as f32).collect();
    let shape = format!("{rows}×{cols} · {n} col{}", if n > 1 { "s" } else { "" });
    let op = format!("mmvq {ty}");
    let cmp = compare(&got, &want, |i| exact[i].1);
    let mut out_rows = vec![row(
        &op,
        shape.clone(),
        "f64, same int8 operands",
        cmp,
        Contract::Rel(1e-5, "f32 sum order"),
    )];
    if n == 1 {
        let cpu = case.cpu()?;
        let cmp = compare(&got, &cpu, |i| exact[i].1);
        out_rows.push(row(&op, shape, "cpu matmul::matmul", cmp, SAME_INT8));
        out_rows.extend(super::mmvq_bias::rows(dev, k, plan, rng, &case, &got)?);
    }
    Ok(out_rows)
}

/// Mat-vec timings: one activation row, an 8B model's FFN shape and a 1.7B model's square
/// projection, weights rotated over copies that together exceed the L2 several times, CUDA
/// events around 200 launches; Q4_K with the wide kernels and without.
pub fn time_mmvq(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<()> {
    println!("\nmmvq timing (1 column, weights rotated past L2):\n");
    println!("| type | shape | kernel | weight MB | µs / call | GB/s |");
    println!("|---|---|---|---|---|---|");
    for (rows, cols) in [(14_336, 4096), (2048, 2048), (2048, 8192)] {
        let x = normal(rng, cols, 1.0);
        let xd = dev.upload(&x)?;
        let mut xq = dev.upload(&vec![0u8; cols / 32 * Q8_1_BLOCK_BYTES])?;
        k.quantize.q8_1(&xd, cols, &mut xq)?;
        let mut out = poisoned(dev, rows)?;
        for ty in MMVQ_TYPES {
            // 256 rows of real blocks, repeated: quantizing the whole matrix takes longer than
            // timing it, and the kernel's speed does not depend on the values.
            let bytes = rows * cols / ty.block_elems() * ty.block_bytes();
            let wq = ferrolm_quant::quantize_to_vec(ty, &normal(rng, 256 * cols, 1.0))?;
            let host: Vec<u8> = wq.iter().copied().cycle().take(bytes).collect();
            let copies = (256usize << 20).div_ceil(bytes).max(2);
            let ws: Vec<QuantMatrix> = (0..copies)
                .map(|_| QuantMatrix::upload(dev, ty, rows, cols, &host))
                .collect::<ferrolm_cuda::Result<_>>()?;
            let variants: &[(bool, &str)] = if ty == GgmlType::Q4K {
                &[(true, "wide"), (false, "block")]
            } else {
                &[(false, "block")]
            };
            for &(wide, name) in variants {
                for w in &ws {
                    k.mmvq.matvec(wide, w, &xq, 1, &mut out, None)?;
                }
                let iters = 200;
                let ms = dev.time_ms(|| {
                    for i in 0..iters {
                        k.mmvq
                            .matvec(wide, &ws[i % copies], &xq, 1, &mut out, None)?;
                    }
                    Ok(())
                })?;
                let us = ms * 1e3 / iters as f64;
                let moved = bytes + cols / 32 * Q8_1_BLOCK_BYTES + rows * 4;
                println!(
                    "| {ty} | {rows}×{cols} | {name} | {:.1} | {us:.1} | {:.0} |",
                    bytes as f64 / 1e6,
                    moved as f64 / us / 1e3
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolm_cuda::ops::formats::{self, Format};
    use std::collections::BTreeSet;

    /// Every format with a kernel is checked: the lists here keep the order of the printed
    /// results, `ferrolm_cuda::ops::formats` says which formats have which kernel.
    #[test]
    fn checked_formats_are_the_tables() {
        let set =
            |v: &mut dyn Iterator<Item = GgmlType>| v.map(|t| t as u32).collect::<BTreeSet<_>>();
        let table = |has: fn(&Format) -> bool| set(&mut formats::with(has));
        assert_eq!(set(&mut MMVQ_TYPES.into_iter()), table(|f| f.matvec));
        assert_eq!(
            set(&mut super::super::mmq::MMQ_TYPES.into_iter()),
            table(|f| f.gemm)
        );
        assert_eq!(
            set(&mut super::super::mmvq_mma::MMA_MV_TYPES.into_iter()),
            table(|f| f.matvec_mma)
        );
        assert_eq!(
            set(&mut SMALL_GEMM_TYPES.into_iter()),
            set(&mut formats::small_gemms().map(|f| f.0))
        );
    }
}
