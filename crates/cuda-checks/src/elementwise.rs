//! `cuda-parity` checks of `kernels/elementwise.cu`'s forward-pass ops (add, add_bias, swiglu,
//! geglu, scale) against the CPU's `norm` functions, on one random 5×4096 batch, and the
//! strided column copy (deepseek2's attention) against the same copy on the host.

use super::checks::{normal, row};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cpu::norm;
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels};
use rand::rngs::StdRng;

pub(super) fn elementwise(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let (n, d) = (5, 4096);
    let a = normal(rng, n * d, 3.0);
    let b = normal(rng, n * d, 1.0);
    let bias = normal(rng, d, 1.0);
    let run = |f: &dyn Fn(&mut CudaSlice<f32>) -> ferrolm_cuda::Result<()>| -> Result<Vec<f32>> {
        let mut ad = dev.upload(&a)?;
        f(&mut ad)?;
        dev.sync()?;
        Ok(dev.download(&ad)?)
    };
    let bd = dev.upload(&b)?;
    let biasd = dev.upload(&bias)?;
    let shape = format!("{n}×{d}");
    let mut rows = Vec::new();

    let got = run(&|ad| k.elementwise.add(ad, &bd))?;
    let mut want = a.clone();
    norm::add_assign(&mut want, &b);
    let cmp = compare(&got, &want, |i| want[i].abs() as f64);
    rows.push(row(
        "add",
        shape.clone(),
        "cpu norm::add_assign",
        cmp,
        Contract::Exact,
    ));

    let got = run(&|ad| k.elementwise.add_bias(ad, &biasd))?;
    let mut want = a.clone();
    norm::add_bias(&mut want, &bias);
    let cmp = compare(&got, &want, |i| want[i].abs() as f64);
    rows.push(row(
        "add_bias",
        shape.clone(),
        "cpu norm::add_bias",
        cmp,
        Contract::Exact,
    ));

    let got = run(&|ad| k.elementwise.swiglu(ad, &bd))?;
    let mut want = a.clone();
    norm::swiglu(&mut want, &b);
    let cmp = compare(&got, &want, |i| want[i].abs() as f64);
    rows.push(row(
        "swiglu",
        shape.clone(),
        "cpu norm::swiglu",
        cmp,
        Contract::Rel(1e-6, "expf within 2 ulp, then 3 roundings"),
    ));

    // gemma3's ops: GELU's tanh form on gates of either sign and the embedding scale.
    let got = run(&|ad| k.elementwise.geglu(ad, &bd))?;
    let mut want = a.clone();
    norm::geglu(&mut want, &b);
    // tanh's last-bit error near -1 is cancelled by the 1 + tanh, so it is bounded relative to
    // |x · up| / 2, not to the (tiny) result of a very negative gate.
    let cmp = compare(&got, &want, |i| {
        (0.5 * a[i] * b[i]).abs().max(want[i].abs()) as f64
    });
    rows.push(row(
        "geglu",
        shape.clone(),
        "cpu norm::geglu",
        cmp,
        Contract::Rel(1e-6, "tanhf within 2 ulp, relative to |x·up|/2"),
    ));

    let s = 2560f32.sqrt();
    let got = run(&|ad| k.elementwise.scale(ad, s))?;
    let mut want = a.clone();
    norm::scale(&mut want, s);
    let cmp = compare(&got, &want, |i| want[i].abs() as f64);
    rows.push(row(
        "scale",
        shape.clone(),
        "cpu norm::scale",
        cmp,
        Contract::Exact,
    ));

    // deepseek2-lite's value heads out of its decompressed kv (16 heads of 128 + 128) into
    // heads of 192, and one run (the compressed part) at an offset.
    for (what, runs, dw) in [
        ("copy_cols heads", [128, 16, 128, 256, 0, 192], 16 * 192),
        ("copy_cols one run", [512, 1, 64, 0, 8, 0], 520),
    ] {
        let [width, count, so, ss, doff, ds] = runs;
        let mut dst = dev.upload(&vec![0f32; n * dw])?;
        k.elementwise
            .copy_cols(&dev.upload(&a)?, d, &mut dst, dw, n, runs)?;
        dev.sync()?;
        let got = dev.download(&dst)?;
        let mut want = vec![0f32; n * dw];
        for r in 0..n {
            for i in 0..count {
                let from = &a[r * d + so + i * ss..][..width];
                want[r * dw + doff + i * ds..][..width].copy_from_slice(from);
            }
        }
        let cmp = compare(&got, &want, |i| want[i].abs() as f64);
        rows.push(row(what, shape.clone(), "host copy", cmp, Contract::Exact));
    }
    Ok(rows)
}
