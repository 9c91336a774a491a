//! `cuda-parity` rows for MoE: routing (`moe_route.cu`) against the CPU's `moe::route`, and the
//! decode experts (`moe_decode.cu`) with the routes held fixed (the same ids and weights on both
//! sides, so a routing flip cannot hide or fake an expert error), at OLMoE's shape.

use super::checks::{exact_row, normal, row, same_bits};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cpu::matmul::{dot_f32_avx512_order, matmul, WeightRef};
use ferrolm_cpu::moe::route;
use ferrolm_cpu::norm::swiglu;
use ferrolm_cpu::CpuPlan;
use ferrolm_cuda::ops::{dequantize_blocks, QuantMatrix, Q8_1_BLOCK_BYTES};
use ferrolm_cuda::ops::{MoeDecodeWork, MoeExperts, MoeRouteWork, MoeRouter};
use ferrolm_cuda::plan::{ExpertMatVec, MoeShape, RouterLogits};
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::MoeGating;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// OLMoE-1B-7B: n_embd, n_ff per expert, experts, experts a token.
const OLMOE: (usize, usize, usize, usize) = (2048, 1024, 64, 8);
/// Ids may differ from the CPU's only between probabilities this close (relative).
const TIE: f64 = 1e-4;

/// Routing at 1-8 tokens takes the mat-vec kernels (a warp a token), past 8 the f32 GEMM.
pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for n in [1, 5, 8, 37, 512] {
        rows.extend(routing(
            dev,
            k,
            plan,
            rng,
            64,
            8,
            MoeGating::SoftmaxTopK,
            n,
        )?);
        rows.extend(routing(
            dev,
            k,
            plan,
            rng,
            128,
            8,
            MoeGating::SoftmaxTopKRenorm,
            n,
        )?);
        // gpt-oss-20b's router: 32 experts, top-4 of the biased logits, softmax over the 4.
        rows.extend(routing(
            dev,
            k,
            plan,
            rng,
            32,
            4,
            MoeGating::TopKSoftmax,
            n,
        )?);
    }
    // Down also in the legacy 5-bit formats (Q5_0/Q5_1 files, Q4_K_M's fallback for widths
    // that are not multiples of 256); their gate/up: `moe::moe_slices`'s rows.
    let downs = [GgmlType::Q4K, GgmlType::Q6K, GgmlType::Q5_0, GgmlType::Q5_1];
    let ex = Experts::random(dev, rng, GgmlType::Q4K, &downs)?;
    for down in downs {
        let legacy = matches!(down, GgmlType::Q5_0 | GgmlType::Q5_1);
        let ns: &[usize] = if legacy { &[1, 5] } else { &[1, 2, 5, 8] };
        for &n in ns {
            rows.extend(decode(dev, k, plan, rng, &ex, down, n)?);
        }
    }
    // MXFP4 experts (gpt-oss's format) throughout, at OLMoE's shape.
    let mx = Experts::random(dev, rng, GgmlType::Mxfp4, &[GgmlType::Mxfp4])?;
    for n in [1, 3, 8] {
        rows.extend(decode(dev, k, plan, rng, &mx, GgmlType::Mxfp4, n)?);
    }
    Ok(rows)
}

/// Routing of `n` tokens over `ne` experts, top-`kk`: ids slot by slot (the CPU's probability
/// of the GPU's pick against the CPU's probability at that rank), then the weights of the
/// tokens whose ids all agree.
#[allow(clippy::too_many_arguments)]
fn routing(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ne: usize,
    kk: usize,
    gating: MoeGating,
    n: usize,
) -> Result<Vec<Row>> {
    // The CPU side as the engine runs it (FERROLM_CPU_MATMUL, FERROLM_ATTN).
    let cpu_plan = CpuPlan::from_env()?;
    let d = OLMOE.0;
    let x = normal(rng, n * d, 1.0);
    let w = normal(rng, ne * d, 0.05);
    let renorm = gating == MoeGating::SoftmaxTopKRenorm;
    let mut router = MoeRouter::upload(dev, &w, ne, d, kk, renorm)?;
    // gpt-oss's gating comes with the router's bias, added to the logits before the top-k.
    let oai = gating == MoeGating::TopKSoftmax;
    let bias = oai.then(|| normal(rng, ne, 0.5));
    if oai {
        router = router.topk_softmax();
    }
    let bias_d = bias.as_ref().map(|b| dev.upload(b)).transpose()?;
    let bd = bias_d.as_ref();
    let mut work = MoeRouteWork::new(dev, n, ne)?;
    let mut ids = dev.upload(&vec![-7i32; n * kk])?;
    let mut weights = dev.upload(&vec![f32::NAN; n * kk])?;
    let xd = dev.upload(&x)?;
    let logits = plan.router_logits(n, d);
    let r = &k.moe_route;
    r.route_biased(
        logits,
        &xd,
        n,
        &router,
        bd,
        &mut work,
        &mut ids,
        &mut weights,
    )?;
    dev.sync()?;
    let (gids, gw) = (dev.download(&ids)?, dev.download(&weights)?);
    // The logits: the CPU's f32 dots in its AVX-512 order, bit for bit, on either kernel.
    let glogits = dev.download(work.logits())?;
    let ordered: Vec<f32> = (0..n * ne)
        .into_par_iter()
        .map(|i| dot_f32_avx512_order(&w[i % ne * d..][..d], &x[i / ne * d..][..d]))
        .collect();
    let logits_row = row(
        "moe route logits",
        format!("{n} tok, {ne} experts ({logits:?})"),
        "the CPU's AVX-512 f32 dot order",
        same_bits(&glogits[..n * ne], &ordered),
        Contract::Exact,
    );
    // The one-launch routing against the two launches it fuses: the same bits (twice, so the
    // second launch shows the block counter was left at zero).
    let mut fused_rows = Vec::new();
    if logits == RouterLogits::MatVecTopk {
        let mut same = true;
        for _ in 0..2 {
            k.moe_route.route_biased(
                RouterLogits::MatVec,
                &xd,
                n,
                &router,
                bd,
                &mut work,
                &mut ids,
                &mut weights,
            )?;
            dev.sync()?;
            let (ui, uw) = (dev.download(&ids)?, dev.download(&weights)?);
            same &= ui == gids && uw.iter().zip(&gw).all(|(a, b)| a.to_bits() == b.to_bits());
            r.route_biased(
                logits,
                &xd,
                n,
                &router,
                bd,
                &mut work,
                &mut ids,
                &mut weights,
            )?;
            dev.sync()?;
            same &= dev.download(&ids)? == gids;
        }
        fused_rows.push(exact_row(
            "moe_route_small (logits + top-k in one launch)",
            format!("{n} tok, {ne} experts, top-{kk}"),
            "moe_logits_small then moe_topk",
            same,
        ));
    }

    let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let wr = WeightRef {
        ty: GgmlType::F32,
        data: &wb,
        rows: ne,
        cols: d,
    };
    let mut probs = vec![0f32; n * ne];
    matmul(&cpu_plan, &wr, &x, &mut probs);
    let (mut got_p, mut want_p, mut got_w, mut want_w) = (vec![], vec![], vec![], vec![]);
    let (mut valid, mut ties) = (true, 0);
    for (t, p) in probs.chunks_exact_mut(ne).enumerate() {
        if let Some(b) = &bias {
            for (l, b) in p.iter_mut().zip(b) {
                *l += b;
            }
        }
        // Leaves the probabilities in p (the biased logits for gpt-oss's gating).
        let picked = route(p, kk, gating);
        let mut sorted: Vec<f32> = p.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let g = &gids[t * kk..][..kk];
        let mut seen = vec![false; ne];
        for (j, &e) in g.iter().enumerate() {
            let ok = (0..ne as i32).contains(&e) && !std::mem::replace(&mut seen[e as usize], true);
            valid &= ok;
            got_p.push(if ok { p[e as usize] } else { f32::NAN });
            want_p.push(sorted[j]);
        }
        if g.iter().zip(&picked).all(|(&e, &(c, _))| e as usize == c) {
            got_w.extend_from_slice(&gw[t * kk..][..kk]);
            want_w.extend(picked.iter().map(|p| p.1));
        } else {
            ties += 1;
        }
    }
    // Logits (gpt-oss's gating) may sit near 0: their noise is relative to 1, not to them.
    let floor = if oai { 1.0 } else { 0.0 };
    let mut ids_cmp = compare(&got_p, &want_p, |i| (want_p[i].abs() as f64).max(floor));
    ids_cmp.2 &= valid;
    let w_cmp = compare(&got_w, &want_w, |i| want_w[i] as f64);
    let shape = format!(
        "{n} tok, {ne} experts, top-{kk}{}",
        match gating {
            MoeGating::SoftmaxTopKRenorm => ", renorm",
            MoeGating::TopKSoftmax => ", biased logits, softmax of the top-k",
            MoeGating::SoftmaxTopK => "",
        }
    );
    let mut rows = vec![
        row(
            "moe route ids (p of pick vs p at rank)",
            shape.clone(),
            "cpu moe::route",
            ids_cmp,
            Contract::Rel(
                TIE,
                "ids swap only at near ties: f32 logits in another order",
            ),
        ),
        row(
            "moe route weights",
            format!("{shape}; {ties} tok with a tie swap left out"),
            "cpu moe::route",
            w_cmp,
            Contract::Rel(1e-4, "logits' f32 sum order, made relative by exp"),
        ),
    ];
    rows.push(logits_row);
    rows.extend(fused_rows);
    Ok(rows)
}

/// Random stacked experts at OLMoE's shape: gate and up in one format, down in several.
struct Experts {
    gate: (Vec<u8>, QuantMatrix),
    up: (Vec<u8>, QuantMatrix),
    down: Vec<(Vec<u8>, QuantMatrix)>,
}

impl Experts {
    fn random(
        dev: &CudaDevice,
        rng: &mut StdRng,
        gate_up: GgmlType,
        downs: &[GgmlType],
    ) -> Result<Self> {
        let (d, ff, ne, _) = OLMOE;
        let mut make = |ty, rows, cols| -> Result<(Vec<u8>, QuantMatrix)> {
            let q = random_matrix(rng, ty, rows, cols, 0.05)?;
            let m = QuantMatrix::upload(dev, ty, rows, cols, &q)?;
            Ok((q, m))
        };
        Ok(Self {
            gate: make(gate_up, ne * ff, d)?,
            up: make(gate_up, ne * ff, d)?,
            down: downs
                .iter()
                .map(|&ty| make(ty, ne * d, ff))
                .collect::<Result<_>>()?,
        })
    }

    fn down(&self, ty: GgmlType) -> &(Vec<u8>, QuantMatrix) {
        self.down.iter().find(|m| m.1.ty == ty).expect("down type")
    }

    fn view(&self, ty: GgmlType) -> MoeExperts<'_> {
        let (_, ff, ne, kk) = OLMOE;
        MoeExperts {
            gate: &self.gate.1,
            up: &self.up.1,
            down: &self.down(ty).1,
            n_expert: ne,
            n_used: kk,
            n_ff: ff,
            epilogue: Default::default(),
        }
    }
}

/// A `rows × cols` matrix of N(0, sigma) values quantized to `ty`, 256 rows a task.
pub(super) fn random_matrix(
    rng: &mut StdRng,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    sigma: f32,
) -> Result<Vec<u8>> {
    let seeds: Vec<u64> = (0..rows.div_ceil(256)).map(|_| rng.gen()).collect();
    let parts: Vec<Vec<u8>> = seeds
        .par_iter()
        .enumerate()
        .map(|(i, &s)| {
            let r = (rows - 256 * i).min(256);
            let v = normal(&mut StdRng::seed_from_u64(s), r * cols, sigma);
            ferrolm_quant::quantize_to_vec(ty, &v)
        })
        .collect::<Result<_, _>>()?;
    Ok(parts.concat())
}

/// Expert `e`'s rows of a stacked matrix, dequantized.
fn expert_rows(q: &[u8], ty: GgmlType, e: usize, rows: usize, cols: usize) -> Result<Vec<f32>> {
    let bytes = rows * cols / ty.block_elems() * ty.block_bytes();
    Ok(ferrolm_quant::dequantize_to_vec(
        ty,
        &q[e * bytes..][..bytes],
        rows * cols,
    )?)
}

/// `Σ w·x` and `Σ |w·x|` in f64 of every row of `w` (`cols` wide) with `x`.
fn dots(w: &[f32], x: &[f32]) -> Vec<(f64, f64)> {
    super::checks::products(w, x, w.len() / x.len(), x.len())
}

/// Token routes that share experts: from a pool of 16 when n > 1, token 1 (if any) the same
/// experts as token 0 in reverse order; positive weights.
fn random_routes(rng: &mut StdRng, n: usize) -> (Vec<i32>, Vec<f32>) {
    let (_, _, ne, kk) = OLMOE;
    let pool: Vec<i32> = if n == 1 {
        (0..ne as i32).collect()
    } else {
        (40..56).collect()
    };
    let mut ids = Vec::with_capacity(n * kk);
    for t in 0..n {
        if t == 1 {
            let first: Vec<i32> = ids[..kk].iter().rev().copied().collect();
            ids.extend(first);
        } else {
            ids.extend(pool.choose_multiple(rng, kk).copied());
        }
    }
    let weights = (0..n * kk).map(|_| rng.gen_range(0.01..0.3)).collect();
    (ids, weights)
}

/// Fused decode of `n` tokens against f64 on its own operands (gate/up/SwiGLU, then down and
/// the weighted sum), against the per-slot path, and against the CPU's per-expert matmuls.
fn decode(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    ex: &Experts,
    down_ty: GgmlType,
    n: usize,
) -> Result<Vec<Row>> {
    // The CPU side as the engine runs it (FERROLM_CPU_MATMUL, FERROLM_ATTN).
    let cpu_plan = CpuPlan::from_env()?;
    let (d, ff, _, kk) = OLMOE;
    let experts = ex.view(down_ty);
    let x = normal(rng, n * d, 1.0);
    let res = normal(rng, n * d, 1.0);
    let (ids, wts) = random_routes(rng, n);
    let (idd, wd) = (dev.upload(&ids)?, dev.upload(&wts)?);
    let mut xq = dev.upload(&vec![0u8; n * d / 32 * Q8_1_BLOCK_BYTES])?;
    k.quantize.q8_1(&dev.upload(&x)?, d, &mut xq)?;
    let mut work = MoeDecodeWork::new(dev, n, &experts)?;
    // The backend's way (fused unless FERROLM_MOE_FUSED=0), and the per-slot path.
    let how = plan.expert_matvec(&MoeShape::new(&experts, n));
    let per_slot = ExpertMatVec {
        fused: false,
        ..how
    };
    // The gate/up kernel in blocks of another size (4 warps where the plan has 8, else 8), with
    // the down weights' L2 prefetch, its quantizing of h (one token), the rows' L1 requests,
    // the tight entries, down's rows before its wait and the bulk L2 requests the other way.
    let resized = ExpertMatVec {
        gate_up_warps: if how.gate_up_warps == 8 { 4 } else { 8 },
        down_prefetch: !how.down_prefetch,
        h_in_gate_up: !how.h_in_gate_up,
        rows_l1: !how.rows_l1,
        tight_gate_up: !how.tight_gate_up,
        tight_down: !how.tight_down,
        down_early: !how.down_early,
        bulk_l2: !how.bulk_l2,
        down_direct: !how.down_direct,
        gate_up_direct: !how.gate_up_direct,
        lean: !how.lean,
        ..how
    };
    let on = |b: bool| if b { "on" } else { "off" };
    let mut outs = Vec::new();
    // Per-slot first, the plan's fused path last: the work buffers are left holding its h.
    for path in [&per_slot, &resized, &how] {
        let mut out = dev.upload(&res)?;
        k.moe_decode
            .forward(path, &xq, n, &idd, &wd, &experts, &mut work, &mut out)?;
        dev.sync()?;
        outs.push(dev.download(&out)?);
    }
    // Written over its output (the backend's way: no clearing launch) against added into
    // zeros: the same bits, on both paths, whatever the output held.
    let mut over_same = true;
    for path in [&per_slot, &how] {
        let mut zeros = dev.upload(&vec![0f32; n * d])?;
        let md = &k.moe_decode;
        md.forward(path, &xq, n, &idd, &wd, &experts, &mut work, &mut zeros)?;
        let mut junk = dev.upload(&vec![f32::NAN; n * d])?;
        md.forward_over(path, &xq, n, &idd, &wd, &experts, &mut work, &mut junk)?;
        dev.sync()?;
        let (a, b) = (dev.download(&zeros)?, dev.download(&junk)?);
        over_same &= a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
    }
    let h = dev.download(work.h())?;
    let hq = dequantize_blocks(&dev.download(work.h_q8_1())?);
    let xf = dequantize_blocks(&dev.download(&xq)?);

    // f64 on the GPU's operands, and the CPU's f32 path, slot by slot.
    let (mut h64, mut h_scale) = (vec![0f32; n * kk * ff], vec![0f64; n * kk * ff]);
    let (mut out64, mut out_scale) = (
        res.clone(),
        res.iter().map(|v| v.abs() as f64).collect::<Vec<_>>(),
    );
    let (mut cpu, mut cpu_scale) = (res.clone(), out_scale.clone());
    let (gq, uq, dq) = (&ex.gate.0, &ex.up.0, &ex.down(down_ty).0);
    let gu_ty = ex.gate.1.ty;
    for s in 0..n * kk {
        let (t, e) = (s / kk, ids[s] as usize);
        let (g, u, dn) = (
            expert_rows(gq, gu_ty, e, ff, d)?,
            expert_rows(uq, gu_ty, e, ff, d)?,
            expert_rows(dq, down_ty, e, d, ff)?,
        );
        let (gd, ud) = (dots(&g, &xf[t * d..][..d]), dots(&u, &xf[t * d..][..d]));
        // An error δ in g moves silu(g)·u by at most 1.1·|u|·δ.
        let bound = |gd: &[(f64, f64)], ud: &[(f64, f64)], c: usize| {
            let (gv, uv) = (gd[c].0, ud[c].0);
            1.1 * uv.abs() * gd[c].1 + (gv / (1.0 + (-gv).exp())).abs() * ud[c].1
        };
        for c in 0..ff {
            let gv = gd[c].0;
            h64[s * ff + c] = (gv / (1.0 + (-gv).exp()) * ud[c].0) as f32;
            h_scale[s * ff + c] = bound(&gd, &ud, c) + (h64[s * ff + c] as f64).abs();
        }
        let w = wts[s] as f64;
        for (c, (v, m)) in dots(&dn, &hq[s * ff..][..ff]).into_iter().enumerate() {
            out64[t * d + c] += (w * v) as f32;
            out_scale[t * d + c] += w * m;
        }

        // The CPU: its own activations (Q8_K for K-quants, Q8_0/Q8_1 for the legacy formats:
        // the GPU's codes and scales there), f32 throughout.
        let xt = &x[t * d..][..d];
        let wref = |q, ty, rows: usize, cols| {
            let all = WeightRef {
                ty,
                data: q,
                rows: rows * OLMOE.2,
                cols,
            };
            all.slice_rows(e * rows, rows)
        };
        let (mut cg, mut cu, mut cd) = (vec![0f32; ff], vec![0f32; ff], vec![0f32; d]);
        matmul(&cpu_plan, &wref(gq, gu_ty, ff, d), xt, &mut cg);
        matmul(&cpu_plan, &wref(uq, gu_ty, ff, d), xt, &mut cu);
        let (gx, ux) = (dots(&g, xt), dots(&u, xt));
        swiglu(&mut cg, &cu);
        matmul(&cpu_plan, &wref(dq, down_ty, d, ff), &cg, &mut cd);
        let dh = dots(&dn, &cg);
        // Down's magnitude, plus what an error in h (bounded as above) can move it by.
        let hb: Vec<f32> = (0..ff).map(|c| bound(&gx, &ux, c) as f32).collect();
        let dabs: Vec<f32> = dn.iter().map(|v| v.abs()).collect();
        for (c, &v) in cd.iter().enumerate() {
            cpu[t * d + c] += wts[s] * v;
            let spread: f64 = dabs[c * ff..][..ff]
                .iter()
                .zip(&hb)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            cpu_scale[t * d + c] += w * (dh[c].1 + spread);
        }
    }
    let shape =
        format!("OLMoE 2048/1024, 64 experts top-8, {n} tok, {gu_ty} gate/up, {down_ty} down");
    let fused = &outs[2];
    Ok(vec![
        row(
            "moe decode gate+up+swiglu",
            shape.clone(),
            "f64, same Q8_1 operands",
            compare(&h, &h64, |i| h_scale[i]),
            Contract::Rel(1e-5, "f32 sum order, expf"),
        ),
        row(
            "moe decode down+combine (fused)",
            shape.clone(),
            "f64, same Q8_1 h",
            compare(fused, &out64, |i| out_scale[i]),
            Contract::Rel(1e-5, "f32 sum order"),
        ),
        row(
            "moe decode per-slot (FERROLM_MOE_FUSED=0)",
            shape.clone(),
            "fused kernels",
            compare(&outs[0], fused, |i| fused[i].abs() as f64),
            Contract::Exact,
        ),
        row(
            &format!(
                "moe decode, gate/up blocks of {} warps, down prefetch {}, h quantized in gate/up {}, rows to L1 {}, down direct {}, gate/up direct {}, lean {}, tight gate/up {}, tight down {}, down early {}, bulk L2 {}",
                resized.gate_up_warps,
                on(resized.down_prefetch),
                on(resized.h_in_gate_up),
                on(resized.rows_l1),
                on(resized.down_direct),
                on(resized.gate_up_direct),
                on(resized.lean),
                on(resized.tight_gate_up),
                on(resized.tight_down),
                on(resized.down_early),
                on(resized.bulk_l2)
            ),
            shape.clone(),
            "the plan's gate/up blocks",
            compare(&outs[1], fused, |i| fused[i].abs() as f64),
            Contract::Exact,
        ),
        exact_row(
            "moe decode written over its output",
            shape.clone(),
            "added into zeros",
            over_same,
        ),
        row(
            "moe decode (fused), routes fixed",
            shape,
            "cpu matmul per expert",
            compare(fused, &cpu, |i| cpu_scale[i]),
            Contract::Rel(
                5e-3,
                "int8 activations twice (x, h): Q8_1 here, Q8_K on the CPU for K-quants",
            ),
        ),
    ])
}

/// Fused decode of one token at OLMoE's shape: 8 experts' gate, up and down read once a call,
/// the expert sets rotated over all 64 (gate+up+down well past the L2), CUDA events around 200
/// calls; GB/s counts the selected experts' weight bytes.
pub fn time_decode(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<()> {
    let (d, ff, ne, kk) = OLMOE;
    let ex = Experts::random(dev, rng, GgmlType::Q4K, &[GgmlType::Q4K, GgmlType::Q6K])?;
    let mut xq = dev.upload(&vec![0u8; d / 32 * Q8_1_BLOCK_BYTES])?;
    k.quantize
        .q8_1(&dev.upload(&normal(rng, d, 1.0))?, d, &mut xq)?;
    let sets = (0..ne / kk)
        .map(|i| dev.upload(&((i * kk) as i32..((i + 1) * kk) as i32).collect::<Vec<_>>()))
        .collect::<ferrolm_cuda::Result<Vec<_>>>()?;
    let wd = dev.upload(&vec![0.125f32; kk])?;
    let mut out = dev.upload(&vec![0f32; d])?;
    println!("\nmoe decode timing (OLMoE shape, 1 token, top-8 of 64, fused):\n");
    println!("| gate/up | down | expert MB / call | µs / call | GB/s |");
    println!("|---|---|---|---|---|");
    for down in [GgmlType::Q4K, GgmlType::Q6K] {
        let experts = ex.view(down);
        let mut work = MoeDecodeWork::new(dev, 1, &experts)?;
        let how = plan.expert_matvec(&MoeShape::new(&experts, 1));
        let mut call = |ids| {
            k.moe_decode
                .forward(&how, &xq, 1, ids, &wd, &experts, &mut work, &mut out)
        };
        for ids in &sets {
            call(ids)?;
        }
        let iters = 200;
        let ms = dev.time_ms(|| {
            for i in 0..iters {
                call(&sets[i % sets.len()])?;
            }
            Ok(())
        })?;
        let us = ms * 1e3 / iters as f64;
        let row_bytes = |ty: GgmlType, cols: usize| cols / ty.block_elems() * ty.block_bytes();
        let bytes = kk * (2 * ff * row_bytes(GgmlType::Q4K, d) + d * row_bytes(down, ff));
        println!(
            "| Q4_K | {down} | {:.1} | {us:.1} | {:.0} |",
            bytes as f64 / 1e6,
            bytes as f64 / us / 1e3
        );
    }
    Ok(())
}
