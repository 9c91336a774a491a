//! `cuda-parity` checks of the mat-vec's bias epilogue (the q/k/v and attention output biases
//! added in the launch, `Plan::bias_in_matvec`): it must give the bits of the plain mat-vec
//! followed by add_bias, for the single and the paired kernels.

use super::checks::{poisoned, row, MatmulCase};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cuda::ops::PairOut;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

/// Rows for `case` (one activation row), whose plain mat-vec gave `plain`.
pub fn rows(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    case: &MatmulCase,
    plain: &[f32],
) -> Result<Vec<Row>> {
    let (w, wide, n) = (&case.w, plan.matvec_wide(case.ty), case.rows);
    let normal = Normal::new(0.0f32, 1.0)?;
    let bias: Vec<f32> = (0..n).map(|_| normal.sample(rng)).collect();
    let bd = dev.upload(&bias)?;
    // add_bias_f32's sum, on the host: one f32 addition.
    let want: Vec<f32> = plain.iter().zip(&bias).map(|(v, b)| v + b).collect();

    let mut single = poisoned(dev, n)?;
    k.mmvq
        .matvec(wide, w, &case.xq, 1, &mut single, Some(&bd))?;
    let (mut a, mut b) = (poisoned(dev, n)?, poisoned(dev, n)?);
    let out = PairOut::Both(&mut a, &mut b);
    k.mmvq.pair(wide, w, w, &case.xq, out, Some([&bd, &bd]))?;
    dev.sync()?;
    let shape = format!("{}×{} · 1 col", case.rows, case.cols);
    let ty = case.ty;
    let outs = [
        (format!("mmvq + bias {ty}"), &single),
        (format!("mmvq pair + biases {ty} (first)"), &a),
        (format!("mmvq pair + biases {ty} (second)"), &b),
    ];
    let mut rows = Vec::new();
    for (op, got) in outs {
        let got = dev.download(got)?;
        let cmp = compare(&got, &want, |i| want[i].abs() as f64);
        let source = "mat-vec, then add_bias";
        rows.push(row(&op, shape.clone(), source, cmp, Contract::Exact));
    }
    Ok(rows)
}
