//! deepseek2's multi-head latent attention, in llama.cpp's non-absorbed form (its graph's
//! `!is_mla` branch): each head's key and value are decompressed from the normed compressed
//! vector by `attn_kv_b`, the key's RoPE tail is one vector shared by every head, and the
//! queries rotate only their tail.
//!
//! The cache holds the decompressed keys and values per head (the simplest correct thing on
//! the CPU, as llama.cpp's non-absorbed path): values are padded with zeros to the key's head
//! size so that the attention op, which takes one head size, runs unchanged; the padding
//! contributes nothing and is dropped from its output.

use crate::backend::{AttnShape, Backend, ColCopy, SeqRows};
use crate::config::Config;
use crate::deepseek2::Deepseek2;
use crate::weights::{AttnWeights, MlaWeights};

/// Scratch activations of one pass, reused by every block.
pub struct MlaBufs<A> {
    q_a: A,
    q_a_normed: A,
    kv_a: A,
    kv_cmpr: A,
    kv_normed: A,
    kv: A,
    k_pe: A,
    q_pe: A,
    v_padded: A,
    out_padded: A,
}

impl<A> MlaBufs<A> {
    pub fn new<B: Backend<Act = A>>(
        b: &B,
        cfg: &Config,
        ds: &Deepseek2,
        n: usize,
    ) -> Result<Self, B::Error> {
        let (h, dk, dv) = (cfg.n_head, cfg.head_dim, cfg.head_dim_v);
        let nope = dk - ds.n_rot;
        let q_rows = if ds.q_lora_rank > 0 { n } else { 0 };
        Ok(Self {
            q_a: b.alloc(q_rows, ds.q_lora_rank)?,
            q_a_normed: b.alloc(q_rows, ds.q_lora_rank)?,
            kv_a: b.alloc(n, ds.kv_lora_rank + ds.n_rot)?,
            kv_cmpr: b.alloc(n, ds.kv_lora_rank)?,
            kv_normed: b.alloc(n, ds.kv_lora_rank)?,
            kv: b.alloc(n, h * (nope + dv))?,
            k_pe: b.alloc(n, ds.n_rot)?,
            q_pe: b.alloc(n, h * ds.n_rot)?,
            // Columns past each head's value stay zero: only the value columns are written.
            v_padded: b.alloc(n, h * dk)?,
            out_padded: b.alloc(n, h * dk)?,
        })
    }
}

/// The attention of block `il` over the normed input `x`, into `out` (`[n][n_head *
/// value_length]`, before the output projection). `q` and `k` are scratch of the key's width.
#[allow(clippy::too_many_arguments)]
pub fn attention<B: Backend>(
    b: &B,
    cfg: &Config,
    ds: &Deepseek2,
    a: &AttnWeights<B::Weight>,
    mla: &MlaWeights<B::Weight>,
    x: &B::Act,
    seqs: &mut [SeqRows<'_, B::Cache>],
    il: usize,
    inp: &B::Inputs,
    bufs: &mut MlaBufs<B::Act>,
    q: &mut B::Act,
    k: &mut B::Act,
    out: &mut B::Act,
) -> Result<(), B::Error> {
    let (h, dk, dv, rot) = (cfg.n_head, cfg.head_dim, cfg.head_dim_v, ds.n_rot);
    let (nope, rank) = (dk - rot, ds.kv_lora_rank);
    let eps = cfg.rms_eps;
    let rope = cfg.rope_for(il);

    // Queries, straight or through the low rank; the compressed key/value with its RoPE part.
    match &mla.q_a {
        None => b.matmul_many(&[&a.q, &a.k], x, &mut [&mut *q, &mut bufs.kv_a])?,
        Some([q_a, q_a_norm]) => {
            b.matmul_many(&[q_a, &a.k], x, &mut [&mut bufs.q_a, &mut bufs.kv_a])?;
            b.rms_norm(&bufs.q_a, q_a_norm, eps, &mut bufs.q_a_normed)?;
            b.matmul(&a.q, &bufs.q_a_normed, q)?;
        }
    }
    b.copy_cols(&bufs.kv_a, &mut bufs.kv_cmpr, ColCopy::one(rank, 0, 0))?;
    b.copy_cols(&bufs.kv_a, &mut bufs.k_pe, ColCopy::one(rot, rank, 0))?;
    b.rope(&mut bufs.k_pe, rot, inp, &rope, None)?;
    b.rms_norm(&bufs.kv_cmpr, &mla.kv_a_norm, eps, &mut bufs.kv_normed)?;
    b.tap("kv_cmpr", il, &bufs.kv_normed)?;
    b.matmul(&a.v, &bufs.kv_normed, &mut bufs.kv)?;

    // Each head's key: its unrotated part from kv, then the shared rotated part.
    let kv_step = nope + dv;
    let per_head = |width, src_off, src_step, dst_off, dst_step| ColCopy {
        width,
        count: h,
        src_off,
        src_step,
        dst_off,
        dst_step,
    };
    b.copy_cols(&bufs.kv, k, per_head(nope, 0, kv_step, 0, dk))?;
    b.copy_cols(&bufs.k_pe, k, per_head(rot, 0, 0, nope, dk))?;
    b.copy_cols(
        &bufs.kv,
        &mut bufs.v_padded,
        per_head(dv, nope, kv_step, 0, dk),
    )?;

    // The queries' RoPE tails, rotated as heads of `rot` dims and put back.
    b.copy_cols(q, &mut bufs.q_pe, per_head(rot, nope, dk, 0, rot))?;
    b.rope(&mut bufs.q_pe, rot, inp, &rope, None)?;
    b.copy_cols(&bufs.q_pe, q, per_head(rot, 0, rot, nope, dk))?;
    b.tap("Qcur", il, q)?;
    b.tap("Kcur", il, k)?;

    let shape = AttnShape {
        n_head: h,
        n_kv_head: h,
        head_dim: dk,
        kq_scale: cfg.kq_scale(),
    };
    let v = &bufs.v_padded;
    b.attention(
        seqs,
        il,
        q,
        k,
        v,
        inp,
        shape,
        None,
        None,
        &mut bufs.out_padded,
    )?;
    b.copy_cols(&bufs.out_padded, out, per_head(dv, 0, dk, 0, dv))
}
