//! The norm taken in the launch of the products after it (`Mmvq::norm_triple`: the
//! attention's q, k and v; `Mmvq::norm_glu`: the FFN's SwiGLU gate/up) against the norm's own
//! launch (`add_rms_norm_q8_1`, or `rms_norm_q8_1` without the residual add) and then the
//! products' launch (`Mmvq::triple`, `Mmvq::pair`). Contract: the same bits in the outputs and
//! in the residual, and the ticket counter back at zero.

use super::checks::{normal, poisoned, row, same_bits, MatmulCase};
use super::mmvq_triple::TripleCase;
use super::{Contract, Row};
use anyhow::{anyhow, Result};
use ferrolm_cuda::ops::{Mmvq, NormIn, PairOut, Q8_1_BLOCK_BYTES, TRIPLES};
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    // Staged activations (FERROLM_MMVQ_STAGE=1): the fused kernels decline.
    if plan.launch_mode().stage_activations {
        return Ok(Vec::new());
    }
    let mut rows = norm_rows(dev, k, plan, rng)?;
    rows.extend(glu_rows(dev, k, plan, rng)?);
    Ok(rows)
}

/// The norm in the launch: qwen3-8b's and qwen3-30b-a3b's q, k, v, and small rows of a small
/// width (the norm's block of 128 threads: one pass of the kernel's block); with and without
/// the residual add, one shape with biases. One ticket counter for all, so that a launch that
/// failed to reset it shows in the next one's residual.
fn norm_rows(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut ticket = dev.zeros::<u32>(1)?;
    let shapes = [
        (4096, 1024, 1024, 4096),
        (4096, 512, 512, 2048),
        (1030, 258, 130, 512),
    ];
    for (ab, c, wide_c) in TRIPLES {
        for (si, &(ra, rb, rc, cols)) in shapes.iter().enumerate() {
            if !Mmvq::norm_triple_width(cols) {
                return Err(anyhow!("the norm triple declines width {cols}"));
            }
            for (added, biased) in [(true, false), (false, false), (true, si == 1)] {
                if biased && si != 1 {
                    continue;
                }
                let case = TripleCase::new(dev, k, plan, rng, (ab, c), (ra, rb, rc, cols), biased)?;
                let ([qa, qb, qc], b3) = (&case.w, case.biases());
                let acc = normal(rng, cols, 1.0);
                let add = dev.upload(&normal(rng, cols, 1.0))?;
                let nw = dev.upload(&normal(rng, cols, 1.0))?;
                let mode = plan.act_quant(ab, cols);
                let ws = [&qa.w, &qb.w, &qc.w];
                let run = |fused: bool, ticket: &mut CudaSlice<u32>| -> Result<Vec<f32>> {
                    let mut x = dev.upload(&acc)?;
                    let mut o = [poisoned(dev, ra)?, poisoned(dev, rb)?, poisoned(dev, rc)?];
                    let [oa, ob, oc] = &mut o;
                    let add = added.then_some(&add);
                    if fused {
                        let norm = NormIn {
                            x: &mut x,
                            add,
                            w: &nw,
                            eps: 1e-6,
                            mode,
                            ticket,
                        };
                        k.mmvq
                            .norm_triple(ws, wide_c, norm, [oa, ob, oc], b3)
                            .ok_or_else(|| anyhow!("no norm triple kernel for {ab} and {c}"))??;
                    } else {
                        let mut h = poisoned(dev, cols)?;
                        let mut hq = dev.upload(&vec![0xa5u8; cols / 32 * Q8_1_BLOCK_BYTES])?;
                        let nr = &k.norm_rope;
                        match add {
                            Some(a) => nr.add_rms_norm_q8_1(
                                &mut x, a, &nw, 1e-6, &mut h, &mut hq, mode, None,
                            )?,
                            None => nr.rms_norm_q8_1(&x, &nw, 1e-6, &mut h, &mut hq, mode, None)?,
                        }
                        k.mmvq
                            .triple(ws, wide_c, &hq, [oa, ob, oc], b3)
                            .ok_or_else(|| anyhow!("no triple kernel for {ab} and {c}"))??;
                    }
                    dev.sync()?;
                    let mut got = dev.download(&x)?;
                    for out in &o {
                        got.extend(dev.download(out)?);
                    }
                    Ok(got)
                };
                let want = run(false, &mut ticket)?;
                let got = run(true, &mut ticket)?;
                let reset = dev.download(&ticket)? == [0];
                let (abs, rel, same) = same_bits(&got, &want);
                let with = match (added, biased) {
                    (true, true) => ", residual add, biases",
                    (true, false) => ", residual add",
                    _ => "",
                };
                rows.push(row(
                    "mmvq norm triple (the norm in the q/k/v launch)",
                    format!("{ab} {ra}+{rb}, {c} {rc}, of {cols} in {mode:?}{with}"),
                    "the norm's launch, then the triple",
                    (abs, rel, same && reset),
                    Contract::Exact,
                ));
            }
        }
    }
    Ok(rows)
}

/// The norm in the SwiGLU gate/up launch: qwen3-8b's (12288 of 4096) and smollm2-1.7b's
/// (8192 of 2048), and a small width, in each wide format; always with the residual add (the
/// FFN's norm has one).
fn glu_rows(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut ticket = dev.zeros::<u32>(1)?;
    for ty in [GgmlType::Q4K, GgmlType::Q8_0] {
        for (ff, cols) in [(12288, 4096), (8192, 2048), (1030, 512)] {
            let g = MatmulCase::new(dev, k, plan, rng, ty, ff, cols, 1)?;
            let u = MatmulCase::new(dev, k, plan, rng, ty, ff, cols, 1)?;
            let acc = normal(rng, cols, 1.0);
            let add = dev.upload(&normal(rng, cols, 1.0))?;
            let nw = dev.upload(&normal(rng, cols, 1.0))?;
            let mode = plan.act_quant(ty, cols);
            let run = |fused: bool, ticket: &mut CudaSlice<u32>| -> Result<Vec<f32>> {
                let mut x = dev.upload(&acc)?;
                let mut out = poisoned(dev, ff)?;
                if fused {
                    let norm = NormIn {
                        x: &mut x,
                        add: Some(&add),
                        w: &nw,
                        eps: 1e-6,
                        mode,
                        ticket,
                    };
                    k.mmvq
                        .norm_glu(&g.w, &u.w, norm, &mut out)
                        .ok_or_else(|| anyhow!("no norm glu kernel for {ty}"))??;
                } else {
                    let mut h = poisoned(dev, cols)?;
                    let mut hq = dev.upload(&vec![0xa5u8; cols / 32 * Q8_1_BLOCK_BYTES])?;
                    let nr = &k.norm_rope;
                    nr.add_rms_norm_q8_1(&mut x, &add, &nw, 1e-6, &mut h, &mut hq, mode, None)?;
                    k.mmvq
                        .pair(true, &g.w, &u.w, &hq, PairOut::Glu(&mut out), None)?;
                }
                dev.sync()?;
                let mut got = dev.download(&x)?;
                got.extend(dev.download(&out)?);
                Ok(got)
            };
            let want = run(false, &mut ticket)?;
            let got = run(true, &mut ticket)?;
            let reset = dev.download(&ticket)? == [0];
            let (abs, rel, same) = same_bits(&got, &want);
            rows.push(row(
                "mmvq norm glu (the norm in the gate/up launch)",
                format!("{ty} {ff} of {cols} in {mode:?}, residual add"),
                "the norm's launch, then the wide GLU pair",
                (abs, rel, same && reset),
                Contract::Exact,
            ));
        }
    }
    Ok(rows)
}
