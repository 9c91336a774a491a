//! Every tensor an architecture needs, identified by role ([`TensorId`]), named and shaped as
//! llama.cpp expects.
//!
//! This is the one place that knows tensor names ([`TensorId::name`]): weight loading,
//! synthesis and the golden-file tests all go through [`tensor_specs`], and backends see only
//! the ids.

use crate::arch::Arch;
use crate::config::Config;

/// What a tensor is for, in a model: the part of a block (or of the model around the blocks) it
/// belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    TokenEmbd,
    /// The output projection (absent when tied to [`TensorRole::TokenEmbd`]).
    Output,
    OutputNorm,
    /// llama3's per-pair RoPE frequency divisors (`head_dim / 2` floats), shared by all blocks.
    RopeFreqs,
    AttnNorm,
    AttnQ,
    AttnK,
    AttnV,
    /// q/k/v projection biases: qwen2's, and llama's when present.
    AttnQBias,
    AttnKBias,
    AttnVBias,
    AttnOutput,
    /// llama's optional bias of the attention output.
    AttnOutputBias,
    /// Query/key RMS norms: per head (qwen3, qwen3moe) or over the whole width (olmoe).
    AttnQNorm,
    AttnKNorm,
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnDown,
    /// llama's optional FFN biases.
    FfnGateBias,
    FfnUpBias,
    FfnDownBias,
    /// The MoE router.
    FfnGateInp,
    /// Stacks of every expert's matrices.
    FfnGateExps,
    FfnUpExps,
    FfnDownExps,
    /// gpt-oss: one learned logit per query head joining each softmax (attention sinks).
    AttnSinks,
    /// gpt-oss: the norm before the MoE (llama.cpp's `attn_post_norm`), in place of `ffn_norm`;
    /// gemma3: the norm of the attention's output, before it joins the residual stream.
    AttnPostNorm,
    /// gemma3: the norm of the FFN's output, before it joins the residual stream.
    FfnPostNorm,
    /// gpt-oss: the router's bias, and each expert's biases (`[width][n_expert]`).
    FfnGateInpBias,
    FfnGateExpsBias,
    FfnUpExpsBias,
    FfnDownExpsBias,
    /// deepseek2: queries through a low-rank pair with a norm between (absent in V2-Lite,
    /// which has `attn_q`).
    AttnQA,
    AttnQANorm,
    AttnQB,
    /// deepseek2: the compressed key/value vector and the shared RoPE key part, its norm, and
    /// its decompression into every head's unrotated key part and value.
    AttnKvAMqa,
    AttnKvANorm,
    AttnKvB,
    /// deepseek2: the shared experts, one dense FFN beside the routed ones.
    FfnGateShexp,
    FfnUpShexp,
    FfnDownShexp,
}

impl TensorRole {
    /// The GGUF name, within its block for a per-layer tensor.
    fn stem(self) -> &'static str {
        use TensorRole::*;
        match self {
            TokenEmbd => "token_embd.weight",
            Output => "output.weight",
            OutputNorm => "output_norm.weight",
            RopeFreqs => "rope_freqs.weight",
            AttnNorm => "attn_norm.weight",
            AttnQ => "attn_q.weight",
            AttnK => "attn_k.weight",
            AttnV => "attn_v.weight",
            AttnQBias => "attn_q.bias",
            AttnKBias => "attn_k.bias",
            AttnVBias => "attn_v.bias",
            AttnOutput => "attn_output.weight",
            AttnOutputBias => "attn_output.bias",
            AttnQNorm => "attn_q_norm.weight",
            AttnKNorm => "attn_k_norm.weight",
            FfnNorm => "ffn_norm.weight",
            FfnGate => "ffn_gate.weight",
            FfnUp => "ffn_up.weight",
            FfnDown => "ffn_down.weight",
            FfnGateBias => "ffn_gate.bias",
            FfnUpBias => "ffn_up.bias",
            FfnDownBias => "ffn_down.bias",
            FfnGateInp => "ffn_gate_inp.weight",
            FfnGateExps => "ffn_gate_exps.weight",
            FfnUpExps => "ffn_up_exps.weight",
            FfnDownExps => "ffn_down_exps.weight",
            AttnSinks => "attn_sinks.weight",
            AttnPostNorm => "post_attention_norm.weight",
            FfnPostNorm => "post_ffw_norm.weight",
            FfnGateInpBias => "ffn_gate_inp.bias",
            FfnGateExpsBias => "ffn_gate_exps.bias",
            FfnUpExpsBias => "ffn_up_exps.bias",
            FfnDownExpsBias => "ffn_down_exps.bias",
            AttnQA => "attn_q_a.weight",
            AttnQANorm => "attn_q_a_norm.weight",
            AttnQB => "attn_q_b.weight",
            AttnKvAMqa => "attn_kv_a_mqa.weight",
            AttnKvANorm => "attn_kv_a_norm.weight",
            AttnKvB => "attn_kv_b.weight",
            FfnGateShexp => "ffn_gate_shexp.weight",
            FfnUpShexp => "ffn_up_shexp.weight",
            FfnDownShexp => "ffn_down_shexp.weight",
        }
    }

    /// A stack of every expert's matrices (the expert is the outermost dimension).
    pub fn is_expert_stack(self) -> bool {
        matches!(
            self,
            TensorRole::FfnGateExps | TensorRole::FfnUpExps | TensorRole::FfnDownExps
        )
    }
}

/// Which tensor of a model: its block (`None` for the embedding, output norm and projection)
/// and its role there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorId {
    pub layer: Option<usize>,
    pub role: TensorRole,
}

impl TensorId {
    /// A tensor outside the blocks.
    pub fn global(role: TensorRole) -> Self {
        Self { layer: None, role }
    }

    /// A tensor of block `layer`.
    pub fn block(layer: usize, role: TensorRole) -> Self {
        Self {
            layer: Some(layer),
            role,
        }
    }

    /// The tensor's name in a GGUF file, e.g. `blk.3.attn_q.weight`.
    pub fn name(&self) -> String {
        match self.layer {
            Some(layer) => block_tensor(layer, self.role.stem()),
            None => self.role.stem().to_owned(),
        }
    }
}

/// What kind of values a tensor holds; synthesis uses it to pick a sensible random
/// distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// A matrix (or stack of expert matrices) applied to activations of width `dims[0]`.
    Weight,
    /// RMS-norm gains.
    Norm,
    /// Projection biases.
    Bias,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub id: TensorId,
    /// `id.name()`.
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub kind: TensorKind,
}

impl TensorSpec {
    pub(crate) fn new(id: TensorId, dims: &[usize], kind: TensorKind) -> Self {
        Self {
            id,
            name: id.name(),
            dims: dims.iter().map(|&d| d as u64).collect(),
            kind,
        }
    }

    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The name of a per-layer tensor, e.g. `blk.3.attn_q.weight`.
pub fn block_tensor(layer: usize, name: &str) -> String {
    format!("blk.{layer}.{name}")
}

/// The tensors `cfg` needs, in the order llama.cpp's converter writes them.
pub fn tensor_specs(cfg: &Config) -> Vec<TensorSpec> {
    use TensorKind::*;
    use TensorRole::*;
    let d = cfg.n_embd;
    let q_width = cfg.n_head * cfg.head_dim;
    let k_width = cfg.n_head_kv * cfg.head_dim;
    let v_width = cfg.n_head_kv * cfg.head_dim_v;
    let o_width = cfg.n_head * cfg.head_dim_v;

    let global = TensorId::global;
    let mut out = vec![TensorSpec::new(
        global(TokenEmbd),
        &[d, cfg.n_vocab],
        Weight,
    )];
    if !cfg.tied_embeddings {
        out.push(TensorSpec::new(global(Output), &[d, cfg.n_vocab], Weight));
    }
    out.push(TensorSpec::new(global(OutputNorm), &[d], Norm));
    if cfg.rope_freqs {
        // Divisors near 1 when synthesized, as the Norm kind draws them.
        out.push(TensorSpec::new(
            global(RopeFreqs),
            &[cfg.head_dim / 2],
            Norm,
        ));
    }

    if cfg.arch == Arch::GptOss {
        gpt_oss_blocks(cfg, &mut out);
        return out;
    }
    if let Some(ds) = &cfg.deepseek2 {
        crate::deepseek2::blocks(cfg, ds, &mut out);
        return out;
    }
    for i in 0..cfg.n_layer {
        let mut t = |role, dims: &[usize], kind| {
            out.push(TensorSpec::new(TensorId::block(i, role), dims, kind))
        };
        t(AttnNorm, &[d], Norm);
        let biased = cfg.biases.qkv;
        for (proj, bias, width) in [
            (AttnQ, AttnQBias, q_width),
            (AttnK, AttnKBias, k_width),
            (AttnV, AttnVBias, v_width),
        ] {
            t(proj, &[d, width], Weight);
            if biased {
                t(bias, &[width], Bias);
            }
        }
        t(AttnOutput, &[o_width, d], Weight);
        if cfg.biases.attn_out {
            t(AttnOutputBias, &[d], Bias);
        }
        match cfg.arch {
            // Per-head norms: one gain vector shared by every head.
            Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3 => {
                t(AttnQNorm, &[cfg.head_dim], Norm);
                t(AttnKNorm, &[cfg.head_dim], Norm);
            }
            // Norms over the whole projection, as in OLMoE's reference code. (llama.cpp sizes
            // both by n_embd, which is the same thing for OLMoE's equal head counts.)
            Arch::Olmoe => {
                t(AttnQNorm, &[q_width], Norm);
                t(AttnKNorm, &[k_width], Norm);
            }
            Arch::Llama | Arch::Qwen2 | Arch::GptOss | Arch::Deepseek2 => {}
        }
        let post_norms = cfg.arch == Arch::Gemma3;
        if post_norms {
            t(AttnPostNorm, &[d], Norm);
        }
        t(FfnNorm, &[d], Norm);
        match &cfg.moe {
            None => {
                t(FfnGate, &[d, cfg.n_ff], Weight);
                t(FfnUp, &[d, cfg.n_ff], Weight);
                t(FfnDown, &[cfg.n_ff, d], Weight);
                if cfg.biases.ffn {
                    t(FfnGateBias, &[cfg.n_ff], Bias);
                    t(FfnUpBias, &[cfg.n_ff], Bias);
                    t(FfnDownBias, &[d], Bias);
                }
            }
            Some(m) => {
                let (e, ff) = (m.n_expert, m.n_ff_exp);
                t(FfnGateInp, &[d, e], Weight);
                t(FfnGateExps, &[d, ff, e], Weight);
                t(FfnUpExps, &[d, ff, e], Weight);
                t(FfnDownExps, &[ff, d, e], Weight);
            }
        }
        if post_norms {
            t(FfnPostNorm, &[d], Norm);
        }
    }
    out
}

/// gpt-oss's blocks, in the order of llama.cpp's converter: biased q/k/v/output projections,
/// the sinks, the norm before the MoE, and the router and experts with their biases.
fn gpt_oss_blocks(cfg: &Config, out: &mut Vec<TensorSpec>) {
    use TensorKind::*;
    use TensorRole::*;
    let d = cfg.n_embd;
    let (q_width, kv_width) = (cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim);
    let m = cfg.moe.as_ref().expect("gpt-oss is an MoE architecture");
    let (e, ff) = (m.n_expert, m.n_ff_exp);
    for i in 0..cfg.n_layer {
        let mut t = |role, dims: &[usize], kind| {
            out.push(TensorSpec::new(TensorId::block(i, role), dims, kind))
        };
        t(AttnNorm, &[d], Norm);
        t(AttnQ, &[d, q_width], Weight);
        t(AttnQBias, &[q_width], Bias);
        t(AttnK, &[d, kv_width], Weight);
        t(AttnKBias, &[kv_width], Bias);
        t(AttnV, &[d, kv_width], Weight);
        t(AttnVBias, &[kv_width], Bias);
        t(AttnOutput, &[q_width, d], Weight);
        t(AttnOutputBias, &[d], Bias);
        t(AttnSinks, &[cfg.n_head], Bias);
        t(AttnPostNorm, &[d], Norm);
        t(FfnGateInp, &[d, e], Weight);
        t(FfnGateInpBias, &[e], Bias);
        t(FfnGateExps, &[d, ff, e], Weight);
        t(FfnGateExpsBias, &[ff, e], Bias);
        t(FfnUpExps, &[d, ff, e], Weight);
        t(FfnUpExpsBias, &[ff, e], Bias);
        t(FfnDownExps, &[ff, d, e], Weight);
        t(FfnDownExpsBias, &[d, e], Bias);
    }
}

#[cfg(test)]
mod tests {
    use super::{TensorId, TensorRole};

    #[test]
    fn ids_name_gguf_tensors() {
        assert_eq!(
            TensorId::block(12, TensorRole::AttnQ).name(),
            "blk.12.attn_q.weight"
        );
        assert_eq!(
            TensorId::block(0, TensorRole::FfnGateInp).name(),
            "blk.0.ffn_gate_inp.weight"
        );
        assert_eq!(
            TensorId::global(TensorRole::TokenEmbd).name(),
            "token_embd.weight"
        );
    }
}
