//! `cuda-parity` checks of the f16 copies a batched step's norm and SwiGLU write beside their
//! f32 output (`FERROLM_F16_COPY`, for the f16 products after them): the f32 output and the
//! activation blocks the same bits as without the copy, and the copy each value rounded to f16
//! to nearest even (`half`'s rounding, what `round_f16` does on the device).

use super::checks::{exact_row, normal, row, same_bits};
use super::{Contract, Row};
use anyhow::Result;
use ferrolm_cuda::ops::{ActQuant, Q8_1_BLOCK_BYTES};
use ferrolm_cuda::{CudaDevice, Kernels};
use half::f16;
use rand::rngs::StdRng;

pub(super) fn all(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = norm(dev, k, rng)?;
    rows.extend(swiglu(dev, k, rng)?);
    Ok(rows)
}

/// Whether `copy` holds every value of `out` rounded to f16.
fn rounds(out: &[f32], copy: &[u16]) -> bool {
    out.len() == copy.len()
        && out
            .iter()
            .zip(copy)
            .all(|(&v, &h)| f16::from_f32(v).to_bits() == h)
}

/// `x += add`, the norm and its Q8_K blocks, with and without the copy: 64 rows of 4096 (a
/// 64-sequence step of qwen3-8b).
fn norm(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let (n, d, eps) = (64, 4096, 1e-6);
    let x = normal(rng, n * d, 2.0);
    let add = normal(rng, n * d, 1.0);
    let w: Vec<f32> = normal(rng, d, 0.2).iter().map(|v| 1.0 + v).collect();
    let (addd, wd) = (dev.upload(&add)?, dev.upload(&w)?);
    let mut runs = Vec::new();
    for with_copy in [false, true] {
        let mut xd = dev.upload(&x)?;
        let mut out = dev.upload(&vec![f32::NAN; n * d])?;
        let mut q = dev.upload(&vec![0u8; n * d / 32 * Q8_1_BLOCK_BYTES])?;
        let mut h = dev.upload(&vec![0u16; n * d])?;
        let copy = with_copy.then_some(&mut h);
        k.norm_rope.add_rms_norm_q8_1(
            &mut xd,
            &addd,
            &wd,
            eps,
            &mut out,
            &mut q,
            ActQuant::Q8K,
            copy,
        )?;
        dev.sync()?;
        runs.push((
            dev.download(&xd)?,
            dev.download(&out)?,
            dev.download(&q)?,
            dev.download(&h)?,
        ));
    }
    let (plain, copied) = (&runs[0], &runs[1]);
    let same = |a: &[f32], b: &[f32]| same_bits(a, b).2;
    let shape = format!("{n}×{d}, Q8_K blocks");
    Ok(vec![
        exact_row(
            "add + rms_norm + f16 copy: x, out",
            shape.clone(),
            "the launch without the copy",
            same(&plain.0, &copied.0) && same(&plain.1, &copied.1) && plain.2 == copied.2,
        ),
        exact_row(
            "add + rms_norm + f16 copy: the copy",
            shape,
            "its f32 out rounded to f16 on the host",
            rounds(&copied.1, &copied.3),
        ),
    ])
}

/// SwiGLU with and without the copy: 64 rows of 12288 (qwen3-8b's h).
fn swiglu(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let len = 64 * 12288;
    let gate = normal(rng, len, 3.0);
    let up = dev.upload(&normal(rng, len, 1.0))?;
    let mut plain = dev.upload(&gate)?;
    k.elementwise.swiglu(&mut plain, &up)?;
    let mut copied = dev.upload(&gate)?;
    let mut h = dev.upload(&vec![0u16; len])?;
    k.elementwise.swiglu_into(&mut copied, &up, Some(&mut h))?;
    dev.sync()?;
    let (plain, copied, h) = (
        dev.download(&plain)?,
        dev.download(&copied)?,
        dev.download(&h)?,
    );
    let shape = "64×12288".to_owned();
    Ok(vec![
        row(
            "swiglu + f16 copy: out",
            shape.clone(),
            "swiglu without the copy",
            same_bits(&copied, &plain),
            Contract::Exact,
        ),
        exact_row(
            "swiglu + f16 copy: the copy",
            shape,
            "its f32 out rounded to f16 on the host",
            rounds(&copied, &h),
        ),
    ])
}
