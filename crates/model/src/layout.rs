//! Every tensor an architecture needs, named and shaped as llama.cpp expects.
//!
//! This is the one place that knows tensor names: weight loading, synthesis and the
//! golden-file tests all go through [`tensor_specs`].

use crate::arch::Arch;
use crate::config::Config;

/// What a tensor is for; synthesis uses it to pick a sensible random distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A matrix (or stack of expert matrices) applied to activations of width `dims[0]`.
    Weight,
    /// RMS-norm gains.
    Norm,
    /// Projection biases.
    Bias,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub role: Role,
}

impl TensorSpec {
    fn new(name: impl Into<String>, dims: &[usize], role: Role) -> Self {
        Self {
            name: name.into(),
            dims: dims.iter().map(|&d| d as u64).collect(),
            role,
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
    use Role::*;
    let d = cfg.n_embd;
    let q_width = cfg.n_head * cfg.head_dim;
    let k_width = cfg.n_head_kv * cfg.head_dim;
    let v_width = cfg.n_head_kv * cfg.head_dim_v;
    let o_width = cfg.n_head * cfg.head_dim_v;

    let mut out = vec![TensorSpec::new(
        "token_embd.weight",
        &[d, cfg.n_vocab],
        Weight,
    )];
    if !cfg.tied_embeddings {
        out.push(TensorSpec::new("output.weight", &[d, cfg.n_vocab], Weight));
    }
    out.push(TensorSpec::new("output_norm.weight", &[d], Norm));

    for i in 0..cfg.n_layer {
        let mut t = |name: &str, dims: &[usize], role| {
            out.push(TensorSpec::new(block_tensor(i, name), dims, role))
        };
        t("attn_norm.weight", &[d], Norm);
        let biased = cfg.arch == Arch::Qwen2;
        for (proj, width) in [
            ("attn_q", q_width),
            ("attn_k", k_width),
            ("attn_v", v_width),
        ] {
            t(&format!("{proj}.weight"), &[d, width], Weight);
            if biased {
                t(&format!("{proj}.bias"), &[width], Bias);
            }
        }
        t("attn_output.weight", &[o_width, d], Weight);
        match cfg.arch {
            // Per-head norms: one gain vector shared by every head.
            Arch::Qwen3 | Arch::Qwen3Moe => {
                t("attn_q_norm.weight", &[cfg.head_dim], Norm);
                t("attn_k_norm.weight", &[cfg.head_dim], Norm);
            }
            // Norms over the whole projection, as in OLMoE's reference code. (llama.cpp sizes
            // both by n_embd, which is the same thing for OLMoE's equal head counts.)
            Arch::Olmoe => {
                t("attn_q_norm.weight", &[q_width], Norm);
                t("attn_k_norm.weight", &[k_width], Norm);
            }
            Arch::Llama | Arch::Qwen2 => {}
        }
        t("ffn_norm.weight", &[d], Norm);
        match &cfg.moe {
            None => {
                t("ffn_gate.weight", &[d, cfg.n_ff], Weight);
                t("ffn_up.weight", &[d, cfg.n_ff], Weight);
                t("ffn_down.weight", &[cfg.n_ff, d], Weight);
            }
            Some(m) => {
                let (e, ff) = (m.n_expert, m.n_ff_exp);
                t("ffn_gate_inp.weight", &[d, e], Weight);
                t("ffn_gate_exps.weight", &[d, ff, e], Weight);
                t("ffn_up_exps.weight", &[d, ff, e], Weight);
                t("ffn_down_exps.weight", &[ff, d, e], Weight);
            }
        }
    }
    out
}
