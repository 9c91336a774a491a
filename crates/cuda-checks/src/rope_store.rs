//! The KV store in the launch that rotates q and k (`NormRope::rope_qk_store`) against the two
//! launches it replaces: the rotation (`rope_qk`, or `qk_norm_rope` with the q/k norms), then
//! `Attention::store`. Contract: the same bits in q, k and every byte of the cache. With the
//! plan's `FERROLM_QK_NORM_REGS` on, the two launches' per-head NEOX norms take
//! `qk_norm_head_rope_neox_f32` (the values in registers), so the rows with per-head norms also
//! hold that kernel to the store launch's norm and rotation, bit for bit.

use super::checks::{exact_row, normal};
use super::Row;
use anyhow::{anyhow, Result};
use ferrolm_cuda::ops::{rope_table_len, KvCache, KvFormat, Rope, RopeArgs, RopeScale};
use ferrolm_cuda::{CudaDevice, CudaSlice, Kernels};
use rand::rngs::StdRng;
use rand::Rng;

/// The head size of every case.
const HEAD_DIM: usize = 128;

/// (query heads, KV heads, norm group): no norms; per-head norms (qwen3); norms over whole
/// rows of equal widths (OLMoE's).
const SHAPES: [(usize, usize, Option<usize>); 3] = [
    (8, 2, None),
    (8, 2, Some(HEAD_DIM)),
    (4, 4, Some(4 * HEAD_DIM)),
];

pub fn all(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for format in [KvFormat::F16, KvFormat::F32] {
        for mode in [Rope::Normal, Rope::Neox] {
            for (hq, hkv, norm) in SHAPES {
                for (n, scaled) in [(1, false), (7, false), (7, true)] {
                    let same = one(dev, k, rng, format, mode, (hq, hkv, norm), n, scaled)?;
                    let (op, reference) = match norm {
                        None => ("rope_qk_store (RoPE + KV store)", "rope_qk then kv_store"),
                        Some(_) => (
                            "qk_norm_rope_store (q/k norms + RoPE + KV store)",
                            "qk_norm_rope then kv_store",
                        ),
                    };
                    let groups = norm.map_or(String::new(), |g| format!(", norms of {g}"));
                    let scaling = if scaled {
                        ", factors + YaRN, table"
                    } else {
                        ""
                    };
                    rows.push(exact_row(
                        op,
                        format!(
                            "{n} tok, {hq}+{hkv} heads of {HEAD_DIM}{groups}, {} cache, \
                             {mode:?}{scaling}",
                            format.name()
                        ),
                        reference,
                        same,
                    ));
                }
            }
        }
    }
    Ok(rows)
}

/// Whether the one launch leaves q, k and the cache as the two launches do; `scaled`: with
/// frequency divisors, YaRN's scaling and the pass's table of angles.
#[allow(clippy::too_many_arguments)]
fn one(
    dev: &CudaDevice,
    k: &Kernels,
    rng: &mut StdRng,
    format: KvFormat,
    mode: Rope,
    (hq, hkv, norm): (usize, usize, Option<usize>),
    n: usize,
    scaled: bool,
) -> Result<bool> {
    let n_ctx = 64;
    let q = normal(rng, n * hq * HEAD_DIM, 1.0);
    let kx = normal(rng, n * hkv * HEAD_DIM, 1.0);
    let v = normal(rng, n * hkv * HEAD_DIM, 1.0);
    let p0: u32 = rng.gen_range(0..(n_ctx - n) as u32);
    let pos: Vec<u32> = (p0..p0 + n as u32).collect();
    let (vd, pd) = (dev.upload(&v)?, dev.upload(&pos)?);
    let g = norm.unwrap_or(HEAD_DIM);
    let (wq, wk) = (
        dev.upload(&normal(rng, g, 1.0))?,
        dev.upload(&normal(rng, g, 1.0))?,
    );
    let eps = 1e-6;
    let factors = rope_factors(dev, rng, HEAD_DIM)?;
    let mut table = dev.upload(&vec![0u32; rope_table_len(n, HEAD_DIM)])?;
    let args = rope_case(k, mode, scaled, &factors, &mut table, HEAD_DIM, &pd)?;
    // The two launches.
    let mut parts = KvCache::new(dev, format, n_ctx, hkv, HEAD_DIM)?;
    let (mut q1, mut k1) = (dev.upload(&q)?, dev.upload(&kx)?);
    match norm {
        None => k
            .norm_rope
            .rope_qk(&mut q1, &mut k1, HEAD_DIM, &pd, &args)?,
        Some(_) => k
            .norm_rope
            .qk_norm_rope(&mut q1, &wq, &mut k1, &wk, eps, HEAD_DIM, &pd, &args)
            .ok_or_else(|| anyhow!("qk_norm_rope refused whole-head groups"))??,
    }
    k.attention.store(&mut parts, &k1, &vd, &pd)?;
    // The one.
    let mut fused = KvCache::new(dev, format, n_ctx, hkv, HEAD_DIM)?;
    let (mut q2, mut k2) = (dev.upload(&q)?, dev.upload(&kx)?);
    let norms = norm.map(|_| (&wq, &wk, eps));
    k.norm_rope
        .rope_qk_store(
            &mut q2, &mut k2, &vd, norms, HEAD_DIM, &pd, &args, &mut fused,
        )
        .ok_or_else(|| anyhow!("rope_qk_store refused an {} cache", format.name()))??;
    dev.sync()?;
    let bits = |a: Vec<f32>, b: Vec<f32>| a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
    Ok(bits(dev.download(&q1)?, dev.download(&q2)?)
        && bits(dev.download(&k1)?, dev.download(&k2)?)
        && parts.read_back(dev)? == fused.read_back(dev)?)
}

/// A case's frequency divisors (llama3's rope_freqs): `head_dim / 2` of them in [1, 8).
pub(super) fn rope_factors(
    dev: &CudaDevice,
    rng: &mut StdRng,
    head_dim: usize,
) -> Result<CudaSlice<f32>> {
    let factors: Vec<f32> = (0..head_dim / 2).map(|_| rng.gen_range(1.0..8.0)).collect();
    Ok(dev.upload(&factors)?)
}

/// A case's rotation (base 10⁶): plain, or (`scaled`) with `factors`, YaRN's scaling and the
/// pass's table of angles, made into `table` for the positions `pos`.
pub(super) fn rope_case<'a>(
    k: &Kernels,
    mode: Rope,
    scaled: bool,
    factors: &'a CudaSlice<f32>,
    table: &'a mut CudaSlice<u32>,
    head_dim: usize,
    pos: &CudaSlice<u32>,
) -> Result<RopeArgs<'a>> {
    let yarn = RopeScale {
        freq_scale: 0.25,
        ext_factor: 1.0,
        mscale: 1.138_629_5,
        corr_low: 12.0,
        corr_high: 40.0,
    };
    let mut args = RopeArgs {
        base: 1_000_000.0,
        mode,
        scale: if scaled { yarn } else { RopeScale::NONE },
        factors: scaled.then_some(factors),
        table: None,
    };
    if scaled {
        k.norm_rope.rope_table(table, head_dim, pos, &args)?;
        args.table = Some(&*table);
    }
    Ok(args)
}
