//! The forward pass of every supported architecture, written once against [`Backend`].
//!
//! All seven share one pre-norm block; they differ only in the switches read off `Config` and
//! the weights present: q/k/v biases (qwen2, gpt-oss; llama's optional biases), q/k RMS norms
//! per head (qwen3, qwen3moe, gemma3) or over the whole width (olmoe), the RoPE pairing and
//! scaling (and llama3's frequency factors; gemma3's sliding blocks' own base), an output
//! bias, attention sinks (gpt-oss) and sliding windows (gpt-oss, gemma3), gemma3's scaled
//! embeddings and norms after attention and FFN, and a dense FFN (SwiGLU, or gemma3's GELU)
//! or a mixture of experts (Mixtral-style files are llama with experts). deepseek2's latent
//! attention runs in [`crate::mla`] in place of the q/k/v projections and their RoPE, and its
//! MoE blocks add shared experts.
//!
//! The pass names its intermediates to the backend ([`Backend::tap`], llama.cpp's graph names),
//! which does nothing with them unless it is the dump adapter ([`crate::dump::Dump`]).

use crate::arch::Arch;

use crate::backend::{
    AttnShape, Backend, GluAct, InputRows, MoeAct, MoeGating, QkRotation, RopeMode, SeqRows,
};
use crate::config::Config;
use crate::weights::{AttnWeights, Ffn, ModelWeights};

pub fn rope_mode(arch: Arch) -> RopeMode {
    match arch {
        Arch::Llama | Arch::Deepseek2 => RopeMode::Normal,
        Arch::Qwen2 | Arch::Qwen3 | Arch::Olmoe | Arch::Qwen3Moe | Arch::GptOss | Arch::Gemma3 => {
            RopeMode::Neox
        }
    }
}

/// The dense FFN's gated activation.
pub fn glu_act(arch: Arch) -> GluAct {
    match arch {
        Arch::Gemma3 => GluAct::Geglu,
        _ => GluAct::Swiglu,
    }
}

/// llama (Mixtral) and qwen3moe renormalize the top-k weights (llama.cpp's `norm_w`); olmoe
/// does not.
pub fn moe_gating(arch: Arch) -> MoeGating {
    match arch {
        Arch::Qwen3Moe | Arch::Llama => MoeGating::SoftmaxTopKRenorm,
        Arch::GptOss => MoeGating::TopKSoftmax,
        _ => MoeGating::SoftmaxTopK,
    }
}

pub fn moe_act(arch: Arch) -> MoeAct {
    match arch {
        // ggml's constants for gpt-oss (llama.cpp's `LLM_FFN_SWIGLU_OAI_MOE`).
        Arch::GptOss => MoeAct::SwigluOai {
            alpha: 1.702,
            limit: 7.0,
        },
        _ => MoeAct::Swiglu,
    }
}

/// Runs the pass's tokens (at their positions, already checked to fit each cache; `inp`, made
/// by [`Backend::inputs`]) through the model and returns the logits of the rows listed in
/// `logit_rows`, `[rows][n_vocab]`.
///
/// The batch may hold several sequences (`seqs`, each a contiguous range of rows with its own
/// KV cache): every op but attention runs over all rows at once, so decoding N sequences
/// costs one pass over the weights instead of N.
pub fn forward<B: Backend>(
    b: &B,
    cfg: &Config,
    w: &ModelWeights<B::Weight>,
    seqs: &mut [SeqRows<'_, B::Cache>],
    inp: &B::Inputs,
    logit_rows: &[usize],
) -> Result<B::Act, B::Error> {
    let mut x = embed(b, cfg, w, inp)?;
    layers(b, cfg, w, seqs, &mut x, inp, 0..cfg.n_layer)?;
    head(b, cfg, w, &x, logit_rows)
}

/// The token embeddings, the residual stream's start.
pub fn embed<B: Backend>(
    b: &B,
    cfg: &Config,
    w: &ModelWeights<B::Weight>,
    inp: &B::Inputs,
) -> Result<B::Act, B::Error> {
    let mut x = b.alloc(inp.rows(), cfg.n_embd)?;
    b.embed(&w.token_embd, inp, &mut x)?;
    if let Some(s) = cfg.embd_scale() {
        b.scale(&mut x, s)?;
        b.tap("inp_scaled", 0, &x)?;
    }
    Ok(x)
}

/// Runs the blocks `range` over the residual stream `x` (one row per position). Split points
/// are free: a model may run its first layers on one backend and the rest on another, as
/// `-ngl` does, with `x` moved between them.
pub fn layers<B: Backend>(
    b: &B,
    cfg: &Config,
    w: &ModelWeights<B::Weight>,
    seqs: &mut [SeqRows<'_, B::Cache>],
    x: &mut B::Act,
    inp: &B::Inputs,
    range: std::ops::Range<usize>,
) -> Result<(), B::Error> {
    if range.is_empty() {
        return Ok(());
    }
    let n = inp.rows();
    let factors = w.rope_freqs.as_ref();
    let act = glu_act(cfg.arch);
    let (q_width, kv_width) = (cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim);

    let mut h = b.alloc(n, cfg.n_embd)?;
    let mut q = b.alloc(n, q_width)?;
    let mut k = b.alloc(n, kv_width)?;
    let mut v = b.alloc(n, cfg.n_head_kv * cfg.head_dim_v)?;
    let mut attn = b.alloc(n, cfg.n_head * cfg.head_dim_v)?;
    let mut proj = b.alloc(n, cfg.n_embd)?;
    // gemma3's norms of the attention and FFN outputs write here, then trade places with proj.
    let post_norms = w.layers.iter().any(|l| l.attn_post_norm.is_some());
    // deepseek2's shared experts write their output here too.
    let post_rows = post_norms || cfg.deepseek2.is_some();
    let mut post = b.alloc(if post_rows { n } else { 0 }, cfg.n_embd)?;
    let mut mla_bufs = match &cfg.deepseek2 {
        Some(ds) => Some(crate::mla::MlaBufs::new(b, cfg, ds, n)?),
        None => None,
    };
    // deepseek2's shared experts, one dense FFN this wide.
    let shexp_ff = cfg.deepseek2.as_ref().map_or(0, |ds| {
        ds.n_shared * cfg.moe.as_ref().map_or(0, |m| m.n_ff_exp)
    });

    let first = range.start;
    for (il, layer) in w
        .layers
        .iter()
        .enumerate()
        .take(range.end)
        .skip(range.start)
    {
        let a = &layer.attn;
        // The previous layer's FFN output joins the residual in the attention's norm.
        let add = (il != first).then_some(&proj);
        if let (Some(ds), Some(mla), Some(bufs)) = (&cfg.deepseek2, &a.mla, &mut mla_bufs) {
            match add {
                Some(p) => b.add_rms_norm(x, p, &a.norm, cfg.rms_eps, &mut h)?,
                None => b.rms_norm(x, &a.norm, cfg.rms_eps, &mut h)?,
            }
            norm_taps(b, il, il != first, x, &h)?;
            let (q, k) = (&mut q, &mut k);
            crate::mla::attention(b, cfg, ds, a, mla, &h, seqs, il, inp, bufs, q, k, &mut attn)?;
        } else {
            let (ws, outs) = (&[&a.q, &a.k, &a.v], &mut [&mut q, &mut k, &mut v]);
            let biases: &[&B::Weight] = match &a.qkv_bias {
                Some([bq, bk, bv]) => &[bq, bk, bv],
                None => &[],
            };
            b.norm_project(x, add, &a.norm, cfg.rms_eps, &mut h, ws, biases, outs)?;
            norm_taps(b, il, il != first, x, &h)?;
            attend(
                b,
                cfg,
                a,
                factors,
                seqs,
                il,
                inp,
                [&mut q, &mut k, &mut v],
                &mut attn,
            )?;
        }
        b.tap("kqv_out", il, &attn)?;
        match &a.output_bias {
            Some(bo) => b.matmul_many_bias(&[&a.output], &[bo], &attn, &mut [&mut proj])?,
            None => b.matmul(&a.output, &attn, &mut proj)?,
        }
        b.all_reduce(&mut proj)?;
        b.tap("attn_out", il, &proj)?;
        if let Some(pn) = &layer.attn_post_norm {
            b.rms_norm(&proj, pn, cfg.rms_eps, &mut post)?;
            std::mem::swap(&mut proj, &mut post);
            b.tap("attn_post_norm", il, &proj)?;
        }
        // A SwiGLU FFN without biases takes its norm with its gate/up (`norm_ffn_glu`).
        let mut glu_out = None;
        match &layer.ffn {
            Ffn::Moe(m) => b.add_rms_norm_moe(x, &proj, &layer.ffn_norm, cfg.rms_eps, &mut h, m)?,
            Ffn::Dense(f) if f.bias.is_none() && act == GluAct::Swiglu => {
                let mut gate = b.alloc(n, cfg.n_ff)?;
                let mut up = b.alloc(n, cfg.n_ff)?;
                let (ws, eps) = ([&f.gate, &f.up], cfg.rms_eps);
                b.norm_ffn_glu(
                    x,
                    &proj,
                    &layer.ffn_norm,
                    eps,
                    &mut h,
                    ws,
                    &mut gate,
                    &mut up,
                )?;
                glu_out = Some(gate);
            }
            Ffn::Dense(_) => b.add_rms_norm(x, &proj, &layer.ffn_norm, cfg.rms_eps, &mut h)?,
        }
        b.tap("ffn_inp", il, x)?;
        b.tap("ffn_norm", il, &h)?;
        match &layer.ffn {
            Ffn::Dense(f) => {
                let gate = match glu_out {
                    Some(gate) => gate,
                    None => {
                        let mut gate = b.alloc(n, cfg.n_ff)?;
                        let mut up = b.alloc(n, cfg.n_ff)?;
                        b.matmul_many(&[&f.gate, &f.up], &h, &mut [&mut gate, &mut up])?;
                        // Each bias joins its projection before the GLU, as llama.cpp's
                        // build_ffn.
                        if let Some([bg, bu, _]) = &f.bias {
                            b.add_bias(&mut gate, bg)?;
                            b.add_bias(&mut up, bu)?;
                        }
                        match act {
                            GluAct::Swiglu => b.swiglu(&mut gate, &up)?,
                            GluAct::Geglu => b.geglu(&mut gate, &up)?,
                        }
                        gate
                    }
                };
                b.matmul(&f.down, &gate, &mut proj)?;
                if let Some([_, _, bd]) = &f.bias {
                    b.add_bias(&mut proj, bd)?;
                }
            }
            Ffn::Moe(m) => {
                b.moe(&h, m, &mut proj)?;
                if let Some(s) = &layer.ffn_shexp {
                    b.tap("ffn_moe_out", il, &proj)?;
                    let mut gate = b.alloc(n, shexp_ff)?;
                    let mut up = b.alloc(n, shexp_ff)?;
                    b.ffn_glu(&s.gate, &s.up, &h, &mut gate, &mut up)?;
                    b.matmul(&s.down, &gate, &mut post)?;
                    b.tap("ffn_shexp", il, &post)?;
                    b.add(&mut proj, &post)?;
                }
            }
        }
        b.all_reduce(&mut proj)?;
        b.tap("ffn_out", il, &proj)?;
        if let Some(pn) = &layer.ffn_post_norm {
            b.rms_norm(&proj, pn, cfg.rms_eps, &mut post)?;
            std::mem::swap(&mut proj, &mut post);
            b.tap("ffn_post_norm", il, &proj)?;
        }
    }
    b.add(x, &proj)?;
    b.tap("l_out", range.end - 1, x)
}

/// The taps after the attention's norm: the residual that ended block `il - 1` (where the
/// norm added it), then the normed input.
fn norm_taps<B: Backend>(
    b: &B,
    il: usize,
    added: bool,
    x: &B::Act,
    h: &B::Act,
) -> Result<(), B::Error> {
    if added {
        b.tap("l_out", il - 1, x)?;
    }
    b.tap("attn_norm", il, h)
}

/// The q/k/v norms and RoPE, and attention over the cache, of block `il` after its q/k/v
/// projections into `[q, k, v]`, into `out`.
#[allow(clippy::too_many_arguments)]
fn attend<B: Backend>(
    b: &B,
    cfg: &Config,
    a: &AttnWeights<B::Weight>,
    factors: Option<&B::Weight>,
    seqs: &mut [SeqRows<'_, B::Cache>],
    il: usize,
    inp: &B::Inputs,
    [q, k, v]: [&mut B::Act; 3],
    out: &mut B::Act,
) -> Result<(), B::Error> {
    let shape = AttnShape {
        n_head: cfg.n_head,
        n_kv_head: cfg.n_head_kv,
        head_dim: cfg.head_dim,
        kq_scale: None,
    };
    // The norm weight's length says whether it is per head or over the whole width.
    let rot = QkRotation {
        norms: a.q_norm.as_ref().zip(a.k_norm.as_ref()),
        eps: cfg.rms_eps,
        head_dim: cfg.head_dim,
        rope: cfg.rope_for(il),
        factors,
        q_scale: cfg.q_scale(),
    };
    let sinks = a.sinks.as_ref();
    b.rope_attention(seqs, il, [q, k, v], &rot, inp, shape, a.window, sinks, out)?;
    Ok(())
}

/// The output norm and projection of the rows `logit_rows` of `x`.
pub fn head<B: Backend>(
    b: &B,
    cfg: &Config,
    w: &ModelWeights<B::Weight>,
    x: &B::Act,
    logit_rows: &[usize],
) -> Result<B::Act, B::Error> {
    if logit_rows.is_empty() {
        // A prefill chunk that is not the prompt's last: only the cache was wanted.
        return b.alloc(0, cfg.n_vocab);
    }
    let last = b.select_rows(x, logit_rows)?;
    let mut normed = b.alloc(logit_rows.len(), cfg.n_embd)?;
    b.rms_norm(&last, &w.output_norm, cfg.rms_eps, &mut normed)?;
    let mut logits = b.alloc(logit_rows.len(), cfg.n_vocab)?;
    b.matmul(w.output(), &normed, &mut logits)?;
    Ok(logits)
}
