//! deepseek2 (DeepSeek-V2, V2-Lite): what its keys add to [`Config`] and the tensors of its
//! blocks, read as llama.cpp's `llama_model_deepseek2` loader reads them.
//!
//! Attention is multi-head latent attention in its "legacy" (non-absorbed) form: keys and
//! values come from a compressed vector (`attn_kv_a_mqa`, normed by `attn_kv_a_norm`) through
//! `attn_kv_b`, with a RoPE part of `rope.dimension_count` dims that all heads share; files
//! that carry `attn_k_b`/`attn_v_b` (newer converters, marked by `attention.key_length_mla`)
//! are refused by name. The FFN is dense for the first `leading_dense_block_count` blocks,
//! then a softmax-gated MoE plus shared experts.

use crate::arch::Arch;
use crate::config::{key, Config};
use crate::error::{ModelError, Result};
use crate::layout::{TensorId, TensorKind, TensorRole, TensorSpec};
use ferrolm_gguf::{GgufFile, GgufWriter};

/// deepseek2's `<arch>.*` keys beyond the common ones (all read by [`Deepseek2::from_gguf`]).
pub const KEYS: [&str; 10] = [
    "leading_dense_block_count",
    "attention.q_lora_rank",
    "attention.kv_lora_rank",
    "expert_shared_count",
    "expert_weights_scale",
    "expert_weights_norm",
    "expert_gating_func",
    "expert_group_count",
    "expert_group_used_count",
    "rope.scaling.yarn_log_multiplier",
];

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX`; 2 (sigmoid, V3's) is refused.
const GATING_SOFTMAX: usize = 1;

/// What deepseek2 adds to the common hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Deepseek2 {
    /// `attention.q_lora_rank`: queries through `attn_q_a` → norm → `attn_q_b`; 0: straight
    /// through `attn_q` (V2-Lite, whose rank llama.cpp never reads).
    pub q_lora_rank: usize,
    /// `attention.kv_lora_rank`: the compressed key/value width.
    pub kv_lora_rank: usize,
    /// `rope.dimension_count`: the rotated tail of every query and key head (the rest,
    /// `key_length - n_rot`, is unrotated).
    pub n_rot: usize,
    /// `leading_dense_block_count`: blocks with a dense FFN before the MoE blocks.
    pub n_dense_lead: usize,
    /// `expert_shared_count`: shared experts, run as one dense FFN `n_shared * n_ff_exp` wide.
    pub n_shared: usize,
    /// `expert_weights_scale` (0 or absent: 1): a factor on the chosen experts' weights.
    pub weights_scale: f32,
    /// `expert_weights_norm`: the chosen experts' weights renormalized to sum to 1.
    pub weights_norm: bool,
}

impl Deepseek2 {
    /// Reads deepseek2's keys; `n_layer` and `n_vocab` pick llama.cpp's "lite" variants.
    pub fn from_gguf(
        f: &GgufFile,
        n_layer: usize,
        n_vocab: usize,
        head_dim: usize,
    ) -> Result<Self> {
        let k = |s: &str| key(Arch::Deepseek2, s);
        let opt = |s: &str| -> Result<Option<usize>> {
            match f.get(&k(s)) {
                None => Ok(None),
                Some(_) => Ok(Some(f.get_usize(&k(s))?)),
            }
        };
        for mla in ["attention.key_length_mla", "attention.value_length_mla"] {
            if f.get(&k(mla)).is_some() {
                return Err(ModelError::Hparam {
                    key: k(mla),
                    what: "marks the split attn_k_b/attn_v_b form of newer converters, which \
                           ferrolm does not run; convert with attn_kv_b (llama.cpp's legacy form)"
                        .into(),
                });
            }
        }
        // llama.cpp's `is_lite`: these never read q_lora_rank and always use attn_q.
        let lite = n_layer == 27 || n_layer == 26 || (n_layer == 48 && n_vocab == 128256);
        let q_lora_rank = if lite {
            0
        } else {
            opt("attention.q_lora_rank")?.ok_or_else(|| ModelError::Hparam {
                key: k("attention.q_lora_rank"),
                what: "missing (llama.cpp requires it outside the 26/27-block lite models)".into(),
            })?
        };
        let n_rot = opt("rope.dimension_count")?.ok_or_else(|| ModelError::Hparam {
            key: k("rope.dimension_count"),
            what: "missing (deepseek2 rotates only the tail of each head)".into(),
        })?;
        if n_rot == 0 || n_rot >= head_dim || n_rot % 2 != 0 {
            return Err(ModelError::Hparam {
                key: k("rope.dimension_count"),
                what: format!("{n_rot} is not an even count below key_length {head_dim}"),
            });
        }
        match opt("expert_gating_func")? {
            None | Some(GATING_SOFTMAX) => {}
            Some(other) => {
                return Err(ModelError::Hparam {
                    key: k("expert_gating_func"),
                    what: format!("{other} is not supported (only 1, softmax, as DeepSeek-V2)"),
                })
            }
        }
        if let Some(groups) = opt("expert_group_count")?.filter(|&g| g > 1) {
            return Err(ModelError::Hparam {
                key: k("expert_group_count"),
                what: format!("{groups} groups: grouped expert routing is not supported"),
            });
        }
        if let Some(t) = f
            .tensors()
            .iter()
            .find(|t| t.name.ends_with("exp_probs_b.bias"))
        {
            return Err(ModelError::Invalid(format!(
                "tensor '{}': expert selection biases (DeepSeek-V3 routing) are not supported",
                t.name
            )));
        }
        let scale = match f.get(&k("expert_weights_scale")) {
            Some(_) => f.get_f32(&k("expert_weights_scale"))?,
            None => 0.0,
        };
        let weights_norm = match f.get(&k("expert_weights_norm")) {
            Some(_) => f.get_bool(&k("expert_weights_norm"))?,
            None => false,
        };
        Ok(Self {
            q_lora_rank,
            kv_lora_rank: opt("attention.kv_lora_rank")?.ok_or_else(|| ModelError::Hparam {
                key: k("attention.kv_lora_rank"),
                what: "missing".into(),
            })?,
            n_rot,
            n_dense_lead: opt("leading_dense_block_count")?.unwrap_or(0),
            n_shared: opt("expert_shared_count")?.ok_or_else(|| ModelError::Hparam {
                key: k("expert_shared_count"),
                what: "missing".into(),
            })?,
            // llama.cpp scales only by a factor other than 0 and 1.
            weights_scale: if scale == 0.0 { 1.0 } else { scale },
            weights_norm,
        })
    }

    /// Checks the values against the common hyperparameters.
    pub fn validate(&self, cfg: &Config) -> Result<()> {
        let bad = |suffix: &str, what: String| {
            Err(ModelError::Hparam {
                key: key(cfg.arch, suffix),
                what,
            })
        };
        if self.kv_lora_rank == 0 {
            return bad("attention.kv_lora_rank", "must be positive".into());
        }
        if self.n_dense_lead > cfg.n_layer {
            return bad(
                "leading_dense_block_count",
                format!("{} is past block_count {}", self.n_dense_lead, cfg.n_layer),
            );
        }
        if cfg.n_head_kv != cfg.n_head {
            return bad(
                "attention.head_count_kv",
                "must equal head_count (attn_kv_b decompresses a key and value per head)".into(),
            );
        }
        if cfg.head_dim_v > cfg.head_dim {
            return bad(
                "attention.value_length",
                format!("{} is past key_length {}", cfg.head_dim_v, cfg.head_dim),
            );
        }
        if !(self.weights_scale.is_finite() && self.weights_scale > 0.0) {
            return bad(
                "expert_weights_scale",
                format!("{} is not a positive number", self.weights_scale),
            );
        }
        Ok(())
    }

    /// Writes the keys as llama.cpp's converter does.
    pub fn write_to(&self, w: &mut GgufWriter) {
        let k = |s: &str| key(Arch::Deepseek2, s);
        let u = |v: usize| v as u32;
        w.set(&k("leading_dense_block_count"), u(self.n_dense_lead));
        // 0 (queries through attn_q) is written too: llama.cpp requires the key outside its
        // lite block counts.
        w.set(&k("attention.q_lora_rank"), u(self.q_lora_rank));
        w.set(&k("attention.kv_lora_rank"), u(self.kv_lora_rank));
        w.set(&k("rope.dimension_count"), u(self.n_rot));
        w.set(&k("expert_shared_count"), u(self.n_shared));
        w.set(&k("expert_weights_scale"), self.weights_scale);
        w.set(&k("expert_weights_norm"), self.weights_norm);
        w.set(&k("expert_gating_func"), GATING_SOFTMAX as u32);
    }

    /// Whether block `layer` has the dense FFN.
    pub fn dense(&self, layer: usize) -> bool {
        layer < self.n_dense_lead
    }
}

/// deepseek2's blocks, in the order of llama.cpp's loader.
pub fn blocks(cfg: &Config, ds: &Deepseek2, out: &mut Vec<TensorSpec>) {
    use TensorKind::*;
    use TensorRole::*;
    let d = cfg.n_embd;
    let nope = cfg.head_dim - ds.n_rot;
    for i in 0..cfg.n_layer {
        let mut t = |role, dims: &[usize], kind| {
            out.push(TensorSpec::new(TensorId::block(i, role), dims, kind))
        };
        t(AttnNorm, &[d], Norm);
        if ds.q_lora_rank > 0 {
            t(AttnQA, &[d, ds.q_lora_rank], Weight);
            t(AttnQANorm, &[ds.q_lora_rank], Norm);
            t(AttnQB, &[ds.q_lora_rank, cfg.n_head * cfg.head_dim], Weight);
        } else {
            t(AttnQ, &[d, cfg.n_head * cfg.head_dim], Weight);
        }
        t(AttnKvAMqa, &[d, ds.kv_lora_rank + ds.n_rot], Weight);
        t(AttnKvANorm, &[ds.kv_lora_rank], Norm);
        t(
            AttnKvB,
            &[ds.kv_lora_rank, cfg.n_head * (nope + cfg.head_dim_v)],
            Weight,
        );
        t(AttnOutput, &[cfg.n_head * cfg.head_dim_v, d], Weight);
        t(FfnNorm, &[d], Norm);
        match (&cfg.moe, ds.dense(i)) {
            (Some(m), false) => {
                let (e, ff) = (m.n_expert, m.n_ff_exp);
                t(FfnGateInp, &[d, e], Weight);
                t(FfnGateExps, &[d, ff, e], Weight);
                t(FfnUpExps, &[d, ff, e], Weight);
                t(FfnDownExps, &[ff, d, e], Weight);
                let shared = ff * ds.n_shared;
                t(FfnGateShexp, &[d, shared], Weight);
                t(FfnUpShexp, &[d, shared], Weight);
                t(FfnDownShexp, &[shared, d], Weight);
            }
            _ => {
                t(FfnGate, &[d, cfg.n_ff], Weight);
                t(FfnUp, &[d, cfg.n_ff], Weight);
                t(FfnDown, &[cfg.n_ff, d], Weight);
            }
        }
    }
}
