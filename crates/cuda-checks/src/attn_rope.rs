//! The decode walk that norms and rotates its own queries and newest key and stores its key and
//! value (`Attention::decode` with a `DecodeRotation`, the plan's `FERROLM_ATTN_ROPE`) against
//! the three launches it replaces: `qk_norm_rope` (per-head norms, NEOX), `Attention::store`,
//! then the tensor-core walk on the rotated q. Contract: the same bits in the output and every
//! byte of the cache, over caches already holding older keys, at positions on and off the
//! tiles' edges, with the plan's splits and with others.

use super::checks::{exact_row, normal, poisoned};
use super::Row;
use anyhow::{anyhow, Result};
use ferrolm_cuda::ops::{
    rope_table_len, AttnSoftmax, DecodeKernel, DecodeRotation, DecodeWork, KvCache, KvFormat, Rope,
    RopeArgs, RopeScale,
};
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;
use rand::Rng;

/// KV heads of every case; the context the caches hold.
const N_KV_HEAD: usize = 2;
const N_CTX: usize = 256;

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for head_dim in [64, 128] {
        for group in [4, 8] {
            // The first key; one short of, on and past a tile's edge; the last.
            for pos in [0, 31, 32, 100, N_CTX - 1] {
                for (splits, scaled, fused) in [
                    (None, false, false),
                    (Some(1), true, false),
                    (Some(16), false, true),
                ] {
                    let case = Case {
                        head_dim,
                        group,
                        pos,
                        splits,
                        scaled,
                        fused,
                    };
                    let (same, detail) = case.run(dev, k, plan, rng)?;
                    let splits =
                        splits.map_or("the plan's splits".into(), |s| format!("{s} splits"));
                    let extras = match (scaled, fused) {
                        (true, _) => ", factors + YaRN, table",
                        (_, true) => ", combine in the walk",
                        _ => "",
                    };
                    rows.push(exact_row(
                        "attn_decode_group_tc_rope (q/k norms + RoPE + KV store + walk)",
                        format!(
                            "1 tok at {pos}, {}+{N_KV_HEAD} heads of {head_dim}, {splits}{extras}{detail}",
                            group * N_KV_HEAD
                        ),
                        "qk_norm_rope, kv_store, then the walk",
                        same,
                    ));
                }
            }
        }
    }
    Ok(rows)
}

struct Case {
    head_dim: usize,
    group: usize,
    pos: usize,
    splits: Option<usize>,
    scaled: bool,
    fused: bool,
}

impl Case {
    /// Whether the one launch leaves the output and the cache as the three do, and where not,
    /// what differed.
    fn run(
        &self,
        dev: &CudaDevice,
        k: &Kernels,
        plan: &Plan,
        rng: &mut StdRng,
    ) -> Result<(bool, String)> {
        let (hd, pos) = (self.head_dim, self.pos);
        let n_head = self.group * N_KV_HEAD;
        let kv_width = N_KV_HEAD * hd;
        // The older keys and values, stored in both caches alike.
        let mut caches = Vec::new();
        if pos > 0 {
            let old_k = dev.upload(&normal(rng, pos * kv_width, 1.0))?;
            let old_v = dev.upload(&normal(rng, pos * kv_width, 1.0))?;
            let old_pos = dev.upload(&(0..pos as u32).collect::<Vec<_>>())?;
            for _ in 0..2 {
                let mut c = KvCache::new(dev, KvFormat::F16, N_CTX, N_KV_HEAD, hd)?;
                k.attention.store(&mut c, &old_k, &old_v, &old_pos)?;
                caches.push(c);
            }
        } else {
            for _ in 0..2 {
                caches.push(KvCache::new(dev, KvFormat::F16, N_CTX, N_KV_HEAD, hd)?);
            }
        }
        let (mut parts, one) = (caches.remove(0), caches.remove(0));
        let q = normal(rng, n_head * hd, 1.0);
        let kx = normal(rng, kv_width, 1.0);
        let vd = dev.upload(&normal(rng, kv_width, 1.0))?;
        let pd = dev.upload(&[pos as u32])?;
        let wq = dev.upload(&normal(rng, hd, 1.0))?;
        let wk = dev.upload(&normal(rng, hd, 1.0))?;
        let eps = 1e-6;
        let factors: Vec<f32> = (0..hd / 2).map(|_| rng.gen_range(1.0..8.0)).collect();
        let factors = dev.upload(&factors)?;
        let yarn = RopeScale {
            freq_scale: 0.25,
            ext_factor: 1.0,
            mscale: 1.138_629_5,
            corr_low: 12.0,
            corr_high: 40.0,
        };
        let mut args = RopeArgs {
            base: 1_000_000.0,
            mode: Rope::Neox,
            scale: if self.scaled { yarn } else { RopeScale::NONE },
            factors: self.scaled.then_some(&factors),
            table: None,
        };
        let mut table = dev.upload(&vec![0u32; rope_table_len(1, hd)])?;
        if self.scaled {
            k.norm_rope.rope_table(&mut table, hd, &pd, &args)?;
            args.table = Some(&table);
        }
        let sm = AttnSoftmax::plain(hd, None);
        let cap = self
            .splits
            .unwrap_or_else(|| plan.decode_splits(N_CTX, N_KV_HEAD));
        let tc = DecodeKernel::GroupTensorCores;
        // The three launches.
        let (mut q1, mut k1) = (dev.upload(&q)?, dev.upload(&kx)?);
        k.norm_rope
            .qk_norm_rope(&mut q1, &wq, &mut k1, &wk, eps, hd, &pd, &args)
            .ok_or_else(|| anyhow!("qk_norm_rope refused heads of {hd}"))??;
        k.attention.store(&mut parts, &k1, &vd, &pd)?;
        let mut work = DecodeWork::new(dev, 1, n_head, hd, cap)?;
        let mut want = poisoned(dev, q.len())?;
        let f = self.fused;
        k.attention.decode(
            f, tc, &q1, None, &parts, &pd, n_head, sm, cap, &mut work, &mut want, None,
        )?;
        // The one.
        let (qd, kd) = (dev.upload(&q)?, dev.upload(&kx)?);
        let rot = DecodeRotation {
            k: &kd,
            v: &vd,
            wq: &wq,
            wk: &wk,
            eps,
            rope: &args,
        };
        let mut work = DecodeWork::new(dev, 1, n_head, hd, cap)?;
        let mut got = poisoned(dev, q.len())?;
        k.attention.decode(
            f,
            tc,
            &qd,
            Some(&rot),
            &one,
            &pd,
            n_head,
            sm,
            cap,
            &mut work,
            &mut got,
            None,
        )?;
        dev.sync()?;
        let (want, got) = (dev.download(&want)?, dev.download(&got)?);
        let differ: Vec<usize> = (0..want.len())
            .filter(|&i| want[i].to_bits() != got[i].to_bits())
            .collect();
        let (cache_want, cache_got) = (parts.read_back(dev)?, one.read_back(dev)?);
        let row = |c: &(Vec<u8>, Vec<u8>)| c.0.len() / N_CTX;
        let cache_differ: Vec<usize> = (0..cache_want.0.len())
            .filter(|&i| cache_want.0[i] != cache_got.0[i] || cache_want.1[i] != cache_got.1[i])
            .map(|i| i / row(&cache_want))
            .collect();
        let same = differ.is_empty() && cache_differ.is_empty();
        let detail = if same {
            String::new()
        } else {
            format!(
                " [{} outputs differ from {:?}: {:?} vs {:?}; cache rows {:?}]",
                differ.len(),
                differ.first(),
                differ.first().map(|&i| want[i]),
                differ.first().map(|&i| got[i]),
                cache_differ.first()
            )
        };
        Ok((same, detail))
    }
}
