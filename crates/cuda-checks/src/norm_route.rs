//! The norm before an MoE router taken in the router's launch (`add_rms_norm_route_small`, a
//! block an expert, and `add_rms_norm_route_cluster`, one cluster of blocks) against the two
//! launches it replaces: the fused norm (`add_rms_norm_q8_1`), then the one-launch routing on
//! its output. Contract: the same bits in the residual, the normed rows, their activation
//! blocks and the choices.

use super::checks::{exact_row, normal};
use super::Row;
use anyhow::Result;
use ferrolm_cuda::ops::{
    ActQuant, MoeRouteWork, MoeRouter, NormInto, NormRouteHow, Q8_1_BLOCK_BYTES,
};
use ferrolm_cuda::plan::RouterLogits;
use ferrolm_cuda::plan::Switches;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;

/// What one routed norm leaves: the residual, the normed rows, their blocks, ids, weights.
type Outputs = (Vec<f32>, Vec<f32>, Vec<u8>, Vec<i32>, Vec<f32>);

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // The cluster launch wherever this device takes it, whether the plan's switch has it on.
    let clustered = Plan::new(
        Switches {
            norm_route_cluster: true,
            ..plan.switches().clone()
        },
        plan.device().clone(),
    );
    // OLMoE's router (64 experts, top-8, rows of 2048: a Q8_K width too), qwen3-30b-a3b's
    // (128, top-8) and gpt-oss-20b's (32, top-4 of the biased logits, rows of 2880: the norm's
    // block of 704 threads).
    for (d, ne, kk, oai) in [
        (2048, 64, 8, false),
        (2048, 128, 8, false),
        (2880, 32, 4, true),
    ] {
        for n in [1, 3, 8] {
            let modes: &[ActQuant] = if d % 256 == 0 {
                &[ActQuant::Q8_1, ActQuant::Q8K]
            } else {
                &[ActQuant::Q8_1]
            };
            for &mode in modes {
                // The cluster launch wherever it runs for these shapes (every token count it
                // takes), the block-an-expert launch where the plan routes: its top-k by one
                // warp a token, and (one token) by the whole last block, which also writes the
                // residual back from the sums its blocks kept, with the norm's outputs by block
                // 0 before its count or a share a block after.
                let routes = plan.norm_route(n, d);
                let small = |topk_block, spread_out| NormRouteHow {
                    cluster: None,
                    topk_block,
                    keep_sums: topk_block,
                    spread_out,
                };
                let cluster = clustered.norm_route_cluster(n, d, ne);
                let launches = [
                    (small(false, false), routes),
                    (small(true, false), routes),
                    (small(true, true), routes),
                    (
                        NormRouteHow {
                            cluster,
                            ..NormRouteHow::default()
                        },
                        cluster.is_some(),
                    ),
                ];
                for (how, run) in launches {
                    if !run {
                        continue;
                    }
                    let same = one(dev, k, rng, d, ne, kk, oai, n, mode, how)?;
                    let small_name = "add_rms_norm_route_small (norm + routing in one launch)";
                    let (name, how) = match (how.cluster, how.topk_block, how.spread_out) {
                        (None, false, _) => (small_name, ""),
                        (None, true, false) => (small_name, ", top-k by the block, sums kept"),
                        (None, true, true) => (
                            small_name,
                            ", top-k by the block, sums kept, outputs a share a block",
                        ),
                        (Some(_), _, _) => {
                            ("add_rms_norm_route_cluster (one cluster)", ", cluster")
                        }
                    };
                    rows.push(exact_row(
                        name,
                        format!("{n} tok of {d}, {ne} experts, top-{kk}, {mode:?}{how}"),
                        "add_rms_norm_q8_1 then moe_route_small",
                        same,
                    ));
                }
            }
        }
    }
    Ok(rows)
}

/// Whether the one launch gives the two launches' bits, twice (the second shows its block
/// counter was left at zero).
#[allow(clippy::too_many_arguments)]
fn one(
    dev: &CudaDevice,
    k: &Kernels,
    rng: &mut StdRng,
    d: usize,
    ne: usize,
    kk: usize,
    oai: bool,
    n: usize,
    mode: ActQuant,
    how: NormRouteHow,
) -> Result<bool> {
    let mut router = MoeRouter::upload(dev, &normal(rng, ne * d, 0.05), ne, d, kk, !oai)?;
    if oai {
        router = router.topk_softmax();
    }
    let bias = oai.then(|| dev.upload(&normal(rng, ne, 0.5))).transpose()?;
    let acc = normal(rng, n * d, 1.0);
    let add = dev.upload(&normal(rng, n * d, 1.0))?;
    let nw = dev.upload(&normal(rng, d, 1.0))?;
    let eps = 1e-6;
    let mut work = MoeRouteWork::new(dev, n, ne)?;
    let run = |work: &mut MoeRouteWork, fused: bool| -> Result<Outputs> {
        let mut x = dev.upload(&acc)?;
        let mut out = dev.upload(&vec![f32::NAN; n * d])?;
        let mut outq = dev.upload(&vec![0xa5u8; n * d / 32 * Q8_1_BLOCK_BYTES])?;
        let mut ids = dev.upload(&vec![-7i32; n * kk])?;
        let mut weights = dev.upload(&vec![f32::NAN; n * kk])?;
        let b = bias.as_ref();
        if fused {
            let norm = NormInto {
                x: &mut x,
                add: &add,
                w: &nw,
                eps,
                out: &mut out,
                outq: &mut outq,
                mode,
            };
            let r = &k.moe_route;
            r.add_norm_route(norm, how, n, &router, b, work, &mut ids, &mut weights, None)?;
        } else {
            k.norm_rope
                .add_rms_norm_q8_1(&mut x, &add, &nw, eps, &mut out, &mut outq, mode, None)?;
            let logits = RouterLogits::MatVecTopk;
            let r = &k.moe_route;
            r.route_biased(logits, &out, n, &router, b, work, &mut ids, &mut weights)?;
        }
        dev.sync()?;
        Ok((
            dev.download(&x)?,
            dev.download(&out)?,
            dev.download(&outq)?,
            dev.download(&ids)?,
            dev.download(&weights)?,
        ))
    };
    let want = run(&mut work, false)?;
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    let mut same = true;
    for _ in 0..2 {
        let got = run(&mut work, true)?;
        same &= bits(&got.0) == bits(&want.0)
            && bits(&got.1) == bits(&want.1)
            && got.2 == want.2
            && got.3 == want.3
            && bits(&got.4) == bits(&want.4);
    }
    Ok(same)
}
