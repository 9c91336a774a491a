//! One token's q, k and v in one launch (`Mmvq::triple`) against the two launches it replaces:
//! the wide pair of q and k, then v's one-row mat-vec in the walk its own launch takes.
//! Contract: the same bits in all three outputs, with and without biases.

use super::checks::{normal, poisoned, row, same_bits, MatmulCase};
use super::{Contract, Row};
use anyhow::{anyhow, Result};
use ferrolm_cuda::ops::{PairOut, TRIPLES};
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // Staged activations (FERROLM_MMVQ_STAGE=1): the triple declines, the pair runs.
    if plan.launch_mode().stage_activations {
        return Ok(rows);
    }
    // qwen3-8b's q, k, v (4096 / 1024 / 1024 of 4096), and rows that are not whole blocks.
    for (ab, c, wide_c) in TRIPLES {
        for (ra, rb, rc, cols) in [(4096, 1024, 1024, 4096), (1030, 258, 130, 2048)] {
            for biased in [false, true] {
                let case = TripleCase::new(dev, k, plan, rng, (ab, c), (ra, rb, rc, cols), biased)?;
                let ([qa, qb, qc], b3) = (&case.w, case.biases());
                let xq = &qa.xq;
                // The two launches.
                let (mut pa, mut pb, mut pc) =
                    (poisoned(dev, ra)?, poisoned(dev, rb)?, poisoned(dev, rc)?);
                let out = PairOut::Both(&mut pa, &mut pb);
                k.mmvq
                    .pair(true, &qa.w, &qb.w, xq, out, b3.map(|[a, b, _]| [a, b]))?;
                k.mmvq
                    .matvec(wide_c, &qc.w, xq, 1, &mut pc, b3.map(|b| b[2]))?;
                // The one.
                let (mut ta, mut tb, mut tc) =
                    (poisoned(dev, ra)?, poisoned(dev, rb)?, poisoned(dev, rc)?);
                let ws = [&qa.w, &qb.w, &qc.w];
                k.mmvq
                    .triple(ws, wide_c, xq, [&mut ta, &mut tb, &mut tc], b3)
                    .ok_or_else(|| anyhow!("no triple kernel for {ab} and {c}"))??;
                dev.sync()?;
                let mut want = dev.download(&pa)?;
                want.extend(dev.download(&pb)?);
                want.extend(dev.download(&pc)?);
                let mut got = dev.download(&ta)?;
                got.extend(dev.download(&tb)?);
                got.extend(dev.download(&tc)?);
                let with = if biased { ", biases" } else { "" };
                rows.push(row(
                    "mmvq triple (q, k, v in one launch)",
                    format!("{ab} {ra}+{rb}, {c} {rc}, of {cols}{with}"),
                    "the wide pair, then v's mat-vec",
                    same_bits(&got, &want),
                    Contract::Exact,
                ));
            }
        }
    }
    Ok(rows)
}

/// q, k and v weights (`ab`, `ab` and `c`, rows `ra`, `rb`, `rc` of `cols`), each with random
/// activations of its own (`MatmulCase`), and a bias for each where `biased`.
pub(super) struct TripleCase {
    pub w: [MatmulCase; 3],
    bias: Option<[CudaSlice<f32>; 3]>,
}

impl TripleCase {
    pub fn new(
        dev: &CudaDevice,
        k: &Kernels,
        plan: &Plan,
        rng: &mut StdRng,
        (ab, c): (GgmlType, GgmlType),
        (ra, rb, rc, cols): (usize, usize, usize, usize),
        biased: bool,
    ) -> Result<Self> {
        let w = [
            MatmulCase::new(dev, k, plan, rng, ab, ra, cols, 1)?,
            MatmulCase::new(dev, k, plan, rng, ab, rb, cols, 1)?,
            MatmulCase::new(dev, k, plan, rng, c, rc, cols, 1)?,
        ];
        let bias = if biased {
            let mut bias = |n: usize| dev.upload(&normal(rng, n, 1.0));
            Some([bias(ra)?, bias(rb)?, bias(rc)?])
        } else {
            None
        };
        Ok(Self { w, bias })
    }

    pub fn biases(&self) -> Option<[&CudaSlice<f32>; 3]> {
        self.bias.as_ref().map(|[a, b, c]| [a, b, c])
    }
}
