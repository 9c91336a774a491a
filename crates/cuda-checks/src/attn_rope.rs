//! The decode walks that norm and rotate their own queries and newest key and store its key and
//! value (`Attention::decode` with a `DecodeRotation`, the plan's `FERROLM_ATTN_ROPE`) against the
//! three launches they replace: `qk_norm_rope` (NEOX), `Attention::store`, then the walk on the
//! rotated q: per-head norms on the tensor-core walk (a KV head's 8 query heads in one block, or in
//! two of 4 with `FERROLM_ATTN_HEAD_SPLIT`), whole-row norms (OLMoE's) on the group block. The head
//! split's contract is the same bits where no block's largest query passes 2^15 (its prescale),
//! which these queries (normed, weights of about 1) never do. Contract: the same bits in the output
//! and every byte of the cache, over caches already holding older keys, at positions on and off the
//! tiles' edges, with the plan's splits and with others.

use super::checks::{exact_row, normal, poisoned};
use super::rope_store::{rope_case, rope_factors};
use super::Row;
use anyhow::{anyhow, Result};
use ferrolm_cuda::ops::{
    rope_table_len, AttnSoftmax, DecodeKernel, DecodeRotation, DecodeWork, KvCache, KvFormat, Rope,
};
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;

/// KV heads of the per-head-norm cases and of the whole-row ones; the context the caches hold.
const N_KV_HEAD: usize = 2;
const WHOLE_ROW_HEADS: usize = 16;
const N_CTX: usize = 256;

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // Per-head norms on the tensor cores (groups of 4 and 8, two KV heads; groups of 8 also in
    // two blocks of 4, the head split), whole-row norms on the group block (one query head a KV
    // head, OLMoE's 16; with its tiles by bulk copies where the plan has them).
    let mut kinds = vec![
        (4, N_KV_HEAD, false, false),
        (8, N_KV_HEAD, false, false),
        (8, N_KV_HEAD, true, false),
        (1, WHOLE_ROW_HEADS, false, false),
    ];
    if plan.device().cc.0 >= 9 {
        kinds.push((1, WHOLE_ROW_HEADS, false, true));
    }
    for head_dim in [64, 128] {
        for &(group, n_kv_head, head_split, bulk) in &kinds {
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
                        n_kv_head,
                        head_split,
                        bulk,
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
                    let op = match (group, head_split, bulk) {
                        (1, _, true) => "attn_decode_group_rope_row_bulk (the same, bulk copies)",
                        (1, _, _) => {
                            "attn_decode_group_rope_row (whole-row q/k norms + RoPE + KV store + walk)"
                        }
                        (_, true, _) => "attn_decode_group_tc_rope_g8h2 (the same, 4 heads a block)",
                        _ => "attn_decode_group_tc_rope (q/k norms + RoPE + KV store + walk)",
                    };
                    rows.push(exact_row(
                        op,
                        format!(
                            "1 tok at {pos}, {}+{n_kv_head} heads of {head_dim}, {splits}{extras}{detail}",
                            group * n_kv_head
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
    n_kv_head: usize,
    head_split: bool,
    bulk: bool,
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
        let (n_kv_head, whole_rows) = (self.n_kv_head, self.group == 1);
        let n_head = self.group * n_kv_head;
        let kv_width = n_kv_head * hd;
        // The older keys and values, stored in both caches alike.
        let mut caches = Vec::new();
        if pos > 0 {
            let old_k = dev.upload(&normal(rng, pos * kv_width, 1.0))?;
            let old_v = dev.upload(&normal(rng, pos * kv_width, 1.0))?;
            let old_pos = dev.upload(&(0..pos as u32).collect::<Vec<_>>())?;
            for _ in 0..2 {
                let mut c = KvCache::new(dev, KvFormat::F16, N_CTX, n_kv_head, hd)?;
                k.attention.store(&mut c, &old_k, &old_v, &old_pos)?;
                caches.push(c);
            }
        } else {
            for _ in 0..2 {
                caches.push(KvCache::new(dev, KvFormat::F16, N_CTX, n_kv_head, hd)?);
            }
        }
        let (mut parts, one) = (caches.remove(0), caches.remove(0));
        let q = normal(rng, n_head * hd, 1.0);
        let kx = normal(rng, kv_width, 1.0);
        let vd = dev.upload(&normal(rng, kv_width, 1.0))?;
        let pd = dev.upload(&[pos as u32])?;
        let norm = if whole_rows { kv_width } else { hd };
        let wq = dev.upload(&normal(rng, norm, 1.0))?;
        let wk = dev.upload(&normal(rng, norm, 1.0))?;
        let eps = 1e-6;
        let factors = rope_factors(dev, rng, hd)?;
        let mut table = dev.upload(&vec![0u32; rope_table_len(1, hd)])?;
        let args = rope_case(k, Rope::Neox, self.scaled, &factors, &mut table, hd, &pd)?;
        let sm = AttnSoftmax::plain(hd, None);
        let cap = self
            .splits
            .unwrap_or_else(|| plan.decode_splits(N_CTX, n_kv_head));
        let kernel = if whole_rows {
            DecodeKernel::Group
        } else {
            DecodeKernel::GroupTensorCores
        };
        // The three launches.
        let (mut q1, mut k1) = (dev.upload(&q)?, dev.upload(&kx)?);
        k.norm_rope
            .qk_norm_rope(&mut q1, &wq, &mut k1, &wk, eps, hd, &pd, &args)
            .ok_or_else(|| anyhow!("qk_norm_rope refused norms of {norm}"))??;
        k.attention.store(&mut parts, &k1, &vd, &pd)?;
        let mut work = DecodeWork::new(dev, 1, n_head, hd, cap)?;
        let mut want = poisoned(dev, q.len())?;
        let f = self.fused;
        k.attention.decode(
            f, kernel, &q1, None, &parts, &pd, n_head, sm, cap, &mut work, &mut want, None,
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
            head_split: self.head_split,
            bulk: self.bulk,
        };
        let mut work = DecodeWork::new(dev, 1, n_head, hd, cap)?;
        let mut got = poisoned(dev, q.len())?;
        k.attention.decode(
            f,
            kernel,
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
