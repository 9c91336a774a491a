//! The coarse ops a forward pass is written against. A backend may fuse what it likes behind
//! them; the architectures in [`crate::forward`] only say what is computed, in which order.
//!
//! Every op returns a `Result` with the backend's own error type (uninhabited where a backend
//! cannot fail), and the pass's token ids and positions reach the ops as one value
//! ([`Backend::Inputs`]) that the backend makes once per pass from [`PassInputs`].

use crate::weights::MoeWeights;
use std::ops::Range;

/// How a head's dimensions are paired for rotary embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i+1)`: llama.
    Normal,
    /// Halves `(i, i + d/2)`: GPT-NeoX style, used by qwen2/qwen3/olmoe.
    Neox,
}

/// How positions become rotation angles: the parameters llama.cpp hands `ggml_rope_ext`,
/// derived once per model from its RoPE keys ([`crate::rope::RopeScaling::params`]). A plain
/// RoPE has `freq_scale` 1, `ext_factor` 0 and `attn_factor` 1, and rotates exactly as before
/// any scaling existed.
///
/// Pair `i` of a head at position `p` (ggml's `rope_yarn`): `theta_extrap = p * base^(-2i/d) /
/// ff[i]` (`ff`: the frequency factors, `rope_freqs.weight`, or 1), `theta_interp = freq_scale *
/// theta_extrap`; with `ext_factor` 0 the angle is `theta_interp`, else the two mix by YaRN's
/// ramp over `corr_dims` and the magnitude gains `1 + 0.1 ln(1 / freq_scale)`. Both cos and sin
/// are multiplied by `attn_factor` (times that gain).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub mode: RopeMode,
    /// `{arch}.rope.freq_base`.
    pub base: f32,
    /// `1 / rope.scaling.factor` (1 without scaling).
    pub freq_scale: f32,
    /// YaRN's extrapolation mix (1 for YaRN, 0 otherwise).
    pub ext_factor: f32,
    /// The magnitude of cos and sin (llama.cpp's `yarn_attn_factor`, as its context derives it).
    pub attn_factor: f32,
    /// YaRN's correction range in pair indices, `[low, high]`.
    pub corr_dims: [f32; 2],
}

impl Rope {
    /// The magnitude of cos and sin: `attn_factor`, times YaRN's gain
    /// `1 + 0.1 ln(1 / freq_scale)` when `ext_factor` is not 0 (as ggml's `rope_yarn`).
    pub fn magnitude(&self) -> f32 {
        if self.ext_factor != 0.0 {
            self.attn_factor * (1.0 + 0.1 * (1.0 / self.freq_scale).ln())
        } else {
            self.attn_factor
        }
    }

    /// Unscaled RoPE of `base`.
    pub fn plain(mode: RopeMode, base: f32) -> Self {
        Self {
            mode,
            base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            corr_dims: [0.0, 0.0],
        }
    }
}

/// Attention geometry of one layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// The factor on `q·k`: `None` for `1 / sqrt(head_dim)`; deepseek2's `mscale² /
    /// sqrt(head_dim)` (as llama.cpp hands its attention the scale, not scaled queries).
    pub kq_scale: Option<f32>,
}

impl AttnShape {
    /// The factor on `q·k`.
    pub fn scale(&self) -> f32 {
        self.kq_scale
            .unwrap_or_else(|| 1.0 / (self.head_dim as f32).sqrt())
    }
}

/// How [`Backend::rope_attention`] treats a block's queries and keys before attention: RMS
/// norms per head (or over the whole row, by the weights' length) where the block has them,
/// RoPE of heads of `head_dim` with the per-pair frequency divisors if the model has them,
/// then the queries scaled where the model scales them.
pub struct QkRotation<'a, W> {
    /// The query and key norms' weights.
    pub norms: Option<(&'a W, &'a W)>,
    pub eps: f32,
    pub head_dim: usize,
    pub rope: Rope,
    pub factors: Option<&'a W>,
    pub q_scale: Option<f32>,
}

/// How the router's top-k probabilities become expert weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeGating {
    /// Softmax over all experts, keep the top-k probabilities as they are (olmoe).
    SoftmaxTopK,
    /// Softmax over all experts, top-k, renormalised to sum to 1 (qwen3moe).
    SoftmaxTopKRenorm,
    /// Top-k of the logits, then a softmax over the k chosen (gpt-oss; llama.cpp's
    /// `SOFTMAX_WEIGHT`).
    TopKSoftmax,
}

/// The gated activation of an MoE expert, `act(gate, up)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MoeAct {
    /// `silu(gate) · up`.
    Swiglu,
    /// gpt-oss's (ggml's `swiglu_oai`): `g = min(gate, limit)`, `u = clamp(up, ±limit)`,
    /// `g · sigmoid(alpha · g) · (u + 1)`.
    SwigluOai { alpha: f32, limit: f32 },
}

/// The gated activation of a dense FFN, `act(gate) · up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GluAct {
    /// `silu(gate) · up` (every architecture but gemma3).
    Swiglu,
    /// `gelu(gate) · up` with GELU's tanh form (gemma3; llama.cpp's `LLM_FFN_GELU` gated in
    /// parallel, ggml's `geglu`).
    Geglu,
}

/// A strided copy of columns ([`Backend::copy_cols`]): in every row, `count` runs of `width`
/// values, run `i` read from column `src_off + i * src_step` and written from column
/// `dst_off + i * dst_step`. deepseek2's attention splits and joins its heads' parts with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColCopy {
    pub width: usize,
    pub count: usize,
    pub src_off: usize,
    pub src_step: usize,
    pub dst_off: usize,
    pub dst_step: usize,
}

impl ColCopy {
    /// One run of `width` columns from `src_off` to `dst_off`.
    pub fn one(width: usize, src_off: usize, dst_off: usize) -> Self {
        Self {
            width,
            count: 1,
            src_off,
            src_step: 0,
            dst_off,
            dst_step: 0,
        }
    }
}

/// What a pass runs over, as host values: one token id and one position per row. Which rows
/// belong to which sequence travels beside it, as [`SeqRows`], with each sequence's cache.
#[derive(Clone, Copy, Debug)]
pub struct PassInputs<'a> {
    pub tokens: &'a [u32],
    pub positions: &'a [u32],
}

impl PassInputs<'_> {
    /// Rows (tokens) in the pass.
    pub fn rows(&self) -> usize {
        self.tokens.len()
    }
}

/// A pass's inputs as a backend holds them ([`Backend::Inputs`]): all the forward pass itself
/// asks of them is how many rows they cover.
pub trait InputRows {
    fn rows(&self) -> usize;
}

/// One sequence of a batch: its KV cache and the rows of the batch's activations that are its
/// tokens. A batch's sequences own disjoint, contiguous row ranges in order; within a range the
/// tokens are consecutive positions of that sequence (`positions[rows]`), as a ubatch is.
pub struct SeqRows<'c, C> {
    pub cache: &'c mut C,
    pub rows: Range<usize>,
}

pub trait Backend {
    /// A weight tensor as the backend holds it.
    type Weight: Sync;
    /// Activations: `n` rows (tokens) of `width` floats.
    type Act;
    /// The KV cache of one sequence, all layers.
    type Cache;
    /// A pass's token ids and positions where the ops read them (host copies on the CPU,
    /// device buffers on a GPU), made once per pass by [`Self::inputs`].
    type Inputs: InputRows;
    /// What an op can fail with; [`std::convert::Infallible`] where nothing can.
    type Error;

    /// The pass's inputs, uploaded (or copied) once for every op of the pass to read.
    fn inputs(&self, pass: &PassInputs<'_>) -> Result<Self::Inputs, Self::Error>;
    fn alloc(&self, n: usize, width: usize) -> Result<Self::Act, Self::Error>;
    /// Row `tokens[t]` of the embedding table into row `t` of `out`.
    fn embed(
        &self,
        table: &Self::Weight,
        inp: &Self::Inputs,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error>;
    fn rms_norm(
        &self,
        x: &Self::Act,
        w: &Self::Weight,
        eps: f32,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error>;
    /// RMS norm applied to each `len(w)`-wide group of every row, in place.
    fn rms_norm_groups(
        &self,
        x: &mut Self::Act,
        w: &Self::Weight,
        eps: f32,
    ) -> Result<(), Self::Error>;
    /// `out = x · Wᵀ`.
    fn matmul(
        &self,
        w: &Self::Weight,
        x: &Self::Act,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error>;
    /// `outs[i] = x · ws[i]ᵀ` for several weights over the same input (q/k/v, gate/up), so a
    /// backend can prepare `x` once (quantize it, say) for all of them.
    fn matmul_many(
        &self,
        ws: &[&Self::Weight],
        x: &Self::Act,
        outs: &mut [&mut Self::Act],
    ) -> Result<(), Self::Error> {
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.matmul(w, x, out)?;
        }
        Ok(())
    }
    fn add_bias(&self, x: &mut Self::Act, b: &Self::Weight) -> Result<(), Self::Error>;
    /// [`Self::matmul_many`], then `biases[i]` added to `outs[i]` (the q/k/v and attention
    /// output biases): a backend may add them in the products' own epilogue.
    fn matmul_many_bias(
        &self,
        ws: &[&Self::Weight],
        biases: &[&Self::Weight],
        x: &Self::Act,
        outs: &mut [&mut Self::Act],
    ) -> Result<(), Self::Error> {
        self.matmul_many(ws, x, outs)?;
        for (b, out) in biases.iter().zip(outs.iter_mut()) {
            self.add_bias(out, b)?;
        }
        Ok(())
    }
    /// Rotary embeddings of every row at its position (`inp`), as `rope` says; `factors` are
    /// the per-pair frequency divisors (`rope_freqs.weight`, `head_dim / 2` floats) if the
    /// model has them.
    fn rope(
        &self,
        x: &mut Self::Act,
        head_dim: usize,
        inp: &Self::Inputs,
        rope: &Rope,
        factors: Option<&Self::Weight>,
    ) -> Result<(), Self::Error>;
    /// [`Self::rope`] of the queries and the keys, which a backend may run as one pass.
    fn rope_qk(
        &self,
        q: &mut Self::Act,
        k: &mut Self::Act,
        head_dim: usize,
        inp: &Self::Inputs,
        rope: &Rope,
        factors: Option<&Self::Weight>,
    ) -> Result<(), Self::Error> {
        self.rope(q, head_dim, inp, rope, factors)?;
        self.rope(k, head_dim, inp, rope, factors)
    }
    /// The per-head (or whole-row) RMS norms of the queries and keys, then [`Self::rope_qk`]:
    /// one pass on a backend that can.
    #[allow(clippy::too_many_arguments)]
    fn qk_norm_rope(
        &self,
        q: &mut Self::Act,
        k: &mut Self::Act,
        q_norm: &Self::Weight,
        k_norm: &Self::Weight,
        eps: f32,
        head_dim: usize,
        inp: &Self::Inputs,
        rope: &Rope,
        factors: Option<&Self::Weight>,
    ) -> Result<(), Self::Error> {
        self.rms_norm_groups(q, q_norm, eps)?;
        self.rms_norm_groups(k, k_norm, eps)?;
        self.rope_qk(q, k, head_dim, inp, rope, factors)
    }
    /// For each sequence of `seqs`: stores its rows of `k`, `v` at their positions (`inp`) in
    /// layer `layer` of its cache, then causal attention of its rows of `q` over everything
    /// that cache holds up to each token's position, into the same rows of `out`. Sequences
    /// never see each other's keys. Everything else in a forward pass is row-wise, so this is
    /// the one op that knows a batch holds several sequences. A batch of one sequence covering
    /// all rows must compute exactly what a single-sequence call always did.
    ///
    /// `window`: sliding-window attention, a token at position `p` sees only the keys at
    /// `p - window < pos <= p` (llama.cpp's standard SWA). `sinks`: one learned logit per query
    /// head that joins each softmax's denominator (gpt-oss's attention sinks), `n_head` floats.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        seqs: &mut [SeqRows<'_, Self::Cache>],
        layer: usize,
        q: &Self::Act,
        k: &Self::Act,
        v: &Self::Act,
        inp: &Self::Inputs,
        shape: AttnShape,
        window: Option<usize>,
        sinks: Option<&Self::Weight>,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error>;
    /// `rot`'s norms, RoPE and query scale on `q` and `k` in place, then [`Self::attention`]:
    /// one call, so that a backend may store the rotated keys (and the values) in its cache
    /// within the rotation's launch. The default runs the parts ([`rope_then_attend`]).
    #[allow(clippy::too_many_arguments)]
    fn rope_attention(
        &self,
        seqs: &mut [SeqRows<'_, Self::Cache>],
        layer: usize,
        [q, k, v]: [&mut Self::Act; 3],
        rot: &QkRotation<'_, Self::Weight>,
        inp: &Self::Inputs,
        shape: AttnShape,
        window: Option<usize>,
        sinks: Option<&Self::Weight>,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error> {
        rope_then_attend(
            self,
            seqs,
            layer,
            [q, k, v],
            rot,
            inp,
            shape,
            window,
            sinks,
            out,
        )
    }
    /// `gate = silu(gate) * up`.
    fn swiglu(&self, gate: &mut Self::Act, up: &Self::Act) -> Result<(), Self::Error>;
    /// `gate = gelu(gate) * up`, GELU's tanh form:
    /// `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`.
    fn geglu(&self, gate: &mut Self::Act, up: &Self::Act) -> Result<(), Self::Error>;
    /// `x *= s`, every element.
    fn scale(&self, x: &mut Self::Act, s: f32) -> Result<(), Self::Error>;
    /// Copies columns of every row of `src` into the same row of `dst`, as `c` says; the
    /// other columns of `dst` keep their values.
    fn copy_cols(
        &self,
        src: &Self::Act,
        dst: &mut Self::Act,
        c: ColCopy,
    ) -> Result<(), Self::Error>;
    /// Routes every token (as `w.gating` says), runs its experts and writes their weighted sum
    /// to `out`.
    fn moe(
        &self,
        x: &Self::Act,
        w: &MoeWeights<Self::Weight>,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error>;
    /// `acc += x`.
    fn add(&self, acc: &mut Self::Act, x: &Self::Act) -> Result<(), Self::Error>;
    /// `x` summed over the ranks of a tensor split ([`crate::split`]), the same sum on every
    /// rank: the attention's and the FFN's partial outputs. Nothing to do for a whole model.
    fn all_reduce(&self, x: &mut Self::Act) -> Result<(), Self::Error> {
        let _ = x;
        Ok(())
    }
    /// `acc += x`, then `out = rms_norm(acc) * w`: the residual add and the next norm, which a
    /// backend may run as one pass.
    fn add_rms_norm(
        &self,
        acc: &mut Self::Act,
        x: &Self::Act,
        w: &Self::Weight,
        eps: f32,
        out: &mut Self::Act,
    ) -> Result<(), Self::Error> {
        self.add(acc, x)?;
        self.rms_norm(acc, w, eps, out)
    }
    /// `acc += add` where given, `h = rms_norm(acc) * w`, then the projections
    /// `outs[i] = h · ws[i]ᵀ (+ biases[i])` (`biases` empty or one a weight): the norm before
    /// the attention and its q, k and v. A backend may take the norm in the projections'
    /// launch and leave `h` unwritten: nothing but the projections reads it.
    #[allow(clippy::too_many_arguments)]
    fn norm_project(
        &self,
        acc: &mut Self::Act,
        add: Option<&Self::Act>,
        w: &Self::Weight,
        eps: f32,
        h: &mut Self::Act,
        ws: &[&Self::Weight],
        biases: &[&Self::Weight],
        outs: &mut [&mut Self::Act],
    ) -> Result<(), Self::Error> {
        match add {
            Some(a) => self.add_rms_norm(acc, a, w, eps, h)?,
            None => self.rms_norm(acc, w, eps, h)?,
        }
        self.matmul_many_bias(ws, biases, h, outs)
    }
    /// `acc += add`, `h = rms_norm(acc) * w`, then [`Self::ffn_glu`] of `h`: the norm before
    /// a SwiGLU FFN and its gate/up. A backend may take the norm in the gate/up launch and
    /// leave `h` (and `up`) unwritten: nothing but the products reads them.
    #[allow(clippy::too_many_arguments)]
    fn norm_ffn_glu(
        &self,
        acc: &mut Self::Act,
        add: &Self::Act,
        w: &Self::Weight,
        eps: f32,
        h: &mut Self::Act,
        [wg, wu]: [&Self::Weight; 2],
        gate: &mut Self::Act,
        up: &mut Self::Act,
    ) -> Result<(), Self::Error> {
        self.add_rms_norm(acc, add, w, eps, h)?;
        self.ffn_glu(wg, wu, h, gate, up)
    }
    /// [`Self::add_rms_norm`] where `out` is the input of the MoE FFN `moe`, whose
    /// [`Self::moe`] call on `out` comes next: a backend may route `out`'s rows in the same
    /// pass and leave the choices with `out` for that call.
    fn add_rms_norm_moe(
        &self,
        acc: &mut Self::Act,
        x: &Self::Act,
        w: &Self::Weight,
        eps: f32,
        out: &mut Self::Act,
        moe: &MoeWeights<Self::Weight>,
    ) -> Result<(), Self::Error> {
        let _ = moe;
        self.add_rms_norm(acc, x, w, eps, out)
    }
    /// `gate = silu(x · Wgᵀ) * (x · Wuᵀ)`, the SwiGLU FFN's first half; `up` is scratch.
    fn ffn_glu(
        &self,
        wg: &Self::Weight,
        wu: &Self::Weight,
        x: &Self::Act,
        gate: &mut Self::Act,
        up: &mut Self::Act,
    ) -> Result<(), Self::Error> {
        self.matmul_many(&[wg, wu], x, &mut [gate, up])?;
        self.swiglu(gate, up)
    }
    /// Copies the chosen rows of `x` into a new activation.
    fn select_rows(&self, x: &Self::Act, rows: &[usize]) -> Result<Self::Act, Self::Error>;
    /// Reads activations back as host floats, row-major.
    fn to_host(&self, x: &Self::Act) -> Result<Vec<f32>, Self::Error>;
    /// Called by the forward pass with each named intermediate (`attn_norm`, `Qcur`, `l_out`,
    /// …, llama.cpp's graph names) of block `layer`: nothing by default; the dump adapter
    /// ([`crate::dump::Dump`]) writes them out.
    fn tap(&self, name: &str, layer: usize, x: &Self::Act) -> Result<(), Self::Error> {
        let _ = (name, layer, x);
        Ok(())
    }
}

/// [`Backend::rope_attention`] as its parts: [`Backend::qk_norm_rope`] (or
/// [`Backend::rope_qk`] without norms), the taps of `Vcur`, `Kcur` and `Qcur`, the query scale,
/// then [`Backend::attention`].
#[allow(clippy::too_many_arguments)]
pub fn rope_then_attend<B: Backend + ?Sized>(
    b: &B,
    seqs: &mut [SeqRows<'_, B::Cache>],
    layer: usize,
    [q, k, v]: [&mut B::Act; 3],
    rot: &QkRotation<'_, B::Weight>,
    inp: &B::Inputs,
    shape: AttnShape,
    window: Option<usize>,
    sinks: Option<&B::Weight>,
    out: &mut B::Act,
) -> Result<(), B::Error> {
    let (hd, rope, factors) = (rot.head_dim, &rot.rope, rot.factors);
    match rot.norms {
        Some((qn, kn)) => b.qk_norm_rope(q, k, qn, kn, rot.eps, hd, inp, rope, factors)?,
        None => b.rope_qk(q, k, hd, inp, rope, factors)?,
    }
    b.tap("Vcur", layer, v)?;
    b.tap("Kcur", layer, k)?;
    b.tap("Qcur", layer, q)?;
    if let Some(s) = rot.q_scale {
        b.scale(q, s)?;
    }
    b.attention(seqs, layer, q, k, v, inp, shape, window, sinks, out)
}
