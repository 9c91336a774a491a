//! One token's top-k left to the fused expert launches (`FERROLM_ROUTE_TOPK_LATE`: the router
//! launch ends with its logits, `moe_decode.cu`'s `LateRoute` takes the top-k in every gate/up
//! and down block and writes the residual back in down) against the router's last block taking
//! them, each followed by the same expert kernels. Contract: the same bits in the residual, the
//! normed rows, their activation blocks, the choices and the experts' output.

use super::checks::{exact_row, normal};
use super::moe_decode::random_matrix;
use super::Row;
use anyhow::{ensure, Result};
use ferrolm_cuda::ops::{
    LateRoute, MoeDecode, MoeDecodeWork, MoeExperts, MoeRouteWork, MoeRouter, NormInto,
    NormRouteHow, QuantMatrix, Q8_1_BLOCK_BYTES,
};
use ferrolm_cuda::plan::MoeShape;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

/// What one routed token leaves: the residual, the normed row, its blocks, ids, weights and
/// the experts' output.
type Outputs = (Vec<f32>, Vec<f32>, Vec<u8>, Vec<i32>, Vec<f32>, Vec<f32>);

/// Expert rows, kept short: the late top-k does not depend on them.
const N_FF: usize = 256;

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // OLMoE's router (64 experts, top-8) and qwen3-30b-a3b's (128, top-8) on Q4_K experts with
    // Q6_K down, and gpt-oss-20b's (32, top-4 of the biased logits, rows of 2880) on MXFP4.
    for (d, ne, kk, oai, gu, dn) in [
        (2048, 64, 8, false, GgmlType::Q4K, GgmlType::Q6K),
        (2048, 128, 8, false, GgmlType::Q4K, GgmlType::Q6K),
        (2880, 32, 4, true, GgmlType::Mxfp4, GgmlType::Mxfp4),
    ] {
        let mut up = |ty, rows, cols| -> Result<QuantMatrix> {
            let q = random_matrix(rng, ty, rows, cols, 0.05)?;
            Ok(QuantMatrix::upload(dev, ty, rows, cols, &q)?)
        };
        let (gate, upm, down) = (
            up(gu, ne * N_FF, d)?,
            up(gu, ne * N_FF, d)?,
            up(dn, ne * d, N_FF)?,
        );
        let experts = MoeExperts {
            gate: &gate,
            up: &upm,
            down: &down,
            n_expert: ne,
            n_used: kk,
            n_ff: N_FF,
            epilogue: Default::default(),
        };
        let how = plan.expert_matvec(&MoeShape::new(&experts, 1));
        if !plan.norm_route(1, d) || !MoeDecode::takes_late(&how, 1, &experts) {
            continue;
        }
        let same = one(dev, k, plan, rng, &experts, d, oai)?;
        rows.push(exact_row(
            "add_rms_norm_route_small + moe decode, top-k late",
            format!("1 tok of {d}, {ne} experts, top-{kk}, {gu} / {dn}"),
            "the router's last block's top-k",
            same,
        ));
    }
    Ok(rows)
}

/// Whether the late top-k gives the router's bits, twice (the second on buffers the first
/// left behind).
fn one(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    experts: &MoeExperts,
    d: usize,
    oai: bool,
) -> Result<bool> {
    let (ne, kk) = (experts.n_expert, experts.n_used);
    let mut router = MoeRouter::upload(dev, &normal(rng, ne * d, 0.05), ne, d, kk, !oai)?;
    if oai {
        router = router.topk_softmax();
    }
    let bias = oai.then(|| dev.upload(&normal(rng, ne, 0.5))).transpose()?;
    let acc = normal(rng, d, 1.0);
    let attn = normal(rng, d, 1.0);
    let nw = dev.upload(&normal(rng, d, 1.0))?;
    let how = plan.expert_matvec(&MoeShape::new(experts, 1));
    let mode = how.x_quant;
    let mut route = MoeRouteWork::new(dev, 1, ne)?;
    let mut work = MoeDecodeWork::new(dev, 1, experts)?;
    let mut run = |late: bool| -> Result<Outputs> {
        let mut x = dev.upload(&acc)?;
        // The attention's output: the router's `add`, then the experts' output over it.
        let mut proj = dev.upload(&attn)?;
        let mut out = dev.upload(&vec![f32::NAN; d])?;
        let mut outq = dev.upload(&vec![0xa5u8; d / 32 * Q8_1_BLOCK_BYTES])?;
        let mut ids = dev.upload(&vec![-7i32; kk])?;
        let mut weights = dev.upload(&vec![f32::NAN; kk])?;
        let norm = NormInto {
            x: &mut x,
            add: &proj,
            w: &nw,
            eps: 1e-6,
            out: &mut out,
            outq: &mut outq,
            mode,
        };
        let route_how = NormRouteHow {
            topk_block: true,
            keep_sums: true,
            late,
            ..NormRouteHow::default()
        };
        let (b, r) = (bias.as_ref(), &k.moe_route);
        r.add_norm_route(
            norm,
            route_how,
            1,
            &router,
            b,
            &mut route,
            &mut ids,
            &mut weights,
        )?;
        let md = &k.moe_decode;
        if late {
            let residual = dev.address(&x);
            let l = LateRoute {
                router: &router,
                logits: route.logits(),
                bias: b,
                residual,
                ids: &mut ids,
                weights: &mut weights,
            };
            md.forward_over_late(&how, &outq, experts, l, &mut work, &mut proj)?;
        } else {
            md.forward_over(
                &how, &outq, 1, &ids, &weights, experts, &mut work, &mut proj,
            )?;
        }
        dev.sync()?;
        Ok((
            dev.download(&x)?,
            dev.download(&out)?,
            dev.download(&outq)?,
            dev.download(&ids)?,
            dev.download(&weights)?,
            dev.download(&proj)?,
        ))
    };
    let want = run(false)?;
    ensure!(
        want.3.iter().all(|&e| (0..ne as i32).contains(&e)),
        "the router's ids {:?} are not experts",
        want.3
    );
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    let mut same = true;
    for _ in 0..2 {
        let got = run(true)?;
        same &= bits(&got.0) == bits(&want.0)
            && bits(&got.1) == bits(&want.1)
            && got.2 == want.2
            && got.3 == want.3
            && bits(&got.4) == bits(&want.4)
            && bits(&got.5) == bits(&want.5);
    }
    Ok(same)
}
