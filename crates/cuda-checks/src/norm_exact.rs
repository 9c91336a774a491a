//! The fused add + RMS norm + quantize on rows of exactly 2, 4 or 8 elements a thread
//! (`add_rms_norm_exact`, the plan's `FERROLM_NORM_EXACT`) against the general loop of the same
//! launch: the other setting of the switch, through a second set of norm kernels. Contract: the
//! same bits in the residual, the normed rows and their activation blocks.

use super::checks::{exact_row, normal};
use super::Row;
use anyhow::Result;
use ferrolm_cuda::ops::launch::{LaunchMode, Launcher};
use ferrolm_cuda::ops::{ActQuant, NormRope, Q8_1_BLOCK_BYTES};
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;

/// What one norm leaves: the residual, the normed rows, their blocks.
type Outputs = (Vec<f32>, Vec<f32>, Vec<u8>);

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mode = plan.launch_mode();
    let flipped = LaunchMode {
        norm_exact: !mode.norm_exact,
        ..mode
    };
    let other = NormRope::load(dev, &Launcher::new(dev.stream().clone(), flipped))?;
    let mut rows = Vec::new();
    // Rows of 2 elements a thread at norm_threads' block (64 over 32), 4 (1024 over 256 threads,
    // 2048 over 512, 4096 over 1024), 8 (8192 over 1024: past the shared stage, so its Q8_K
    // pass reads back), and one that is not exact (2880 over 704).
    for d in [64, 1024, 2048, 4096, 8192, 2880] {
        for n in [1, 5] {
            let modes: &[ActQuant] = if d % 256 == 0 {
                &[ActQuant::Q8_1, ActQuant::Q8K]
            } else {
                &[ActQuant::Q8_1]
            };
            for &q in modes {
                let x = normal(rng, n * d, 2.0);
                let add = normal(rng, n * d, 1.0);
                let w: Vec<f32> = normal(rng, d, 0.2).iter().map(|v| 1.0 + v).collect();
                let a = run(dev, &k.norm_rope, &x, &add, &w, q)?;
                let b = run(dev, &other, &x, &add, &w, q)?;
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
                let same = bits(&a.0) == bits(&b.0) && bits(&a.1) == bits(&b.1) && a.2 == b.2;
                rows.push(exact_row(
                    "add_rms_norm_q8_1 on exact rows (FERROLM_NORM_EXACT)",
                    format!("{n} rows of {d}, {q:?}"),
                    "its general loop",
                    same,
                ));
            }
        }
    }
    Ok(rows)
}

fn run(
    dev: &CudaDevice,
    nr: &NormRope,
    x: &[f32],
    add: &[f32],
    w: &[f32],
    q: ActQuant,
) -> Result<Outputs> {
    let mut xd = dev.upload(x)?;
    let (addd, wd) = (dev.upload(add)?, dev.upload(w)?);
    let mut out = dev.upload(&vec![f32::NAN; x.len()])?;
    let mut outq = dev.upload(&vec![0xa5u8; x.len() / 32 * Q8_1_BLOCK_BYTES])?;
    nr.add_rms_norm_q8_1(&mut xd, &addd, &wd, 1e-6, &mut out, &mut outq, q, None)?;
    dev.sync()?;
    Ok((
        dev.download(&xd)?,
        dev.download(&out)?,
        dev.download(&outq)?,
    ))
}
