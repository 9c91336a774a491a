//! Model weights bound by role, generic over how a backend holds a tensor.

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layout::{block_tensor, tensor_specs};
use ferrolm_gguf::{GgmlType, GgufFile};

pub struct AttnWeights<W> {
    pub norm: W,
    pub q: W,
    pub k: W,
    pub v: W,
    pub output: W,
    /// qwen2: biases of q, k, v.
    pub qkv_bias: Option<[W; 3]>,
    /// qwen3/qwen3moe (per head) and olmoe (whole width).
    pub q_norm: Option<W>,
    pub k_norm: Option<W>,
}

pub struct DenseFfn<W> {
    pub gate: W,
    pub up: W,
    pub down: W,
}

/// Experts are stacked: expert `e` owns rows `e*n_ff..(e+1)*n_ff` of `gate`/`up` and rows
/// `e*n_embd..(e+1)*n_embd` of `down`.
pub struct MoeWeights<W> {
    pub router: W,
    pub gate: W,
    pub up: W,
    pub down: W,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff: usize,
}

pub enum Ffn<W> {
    Dense(DenseFfn<W>),
    Moe(MoeWeights<W>),
}

pub struct LayerWeights<W> {
    pub attn: AttnWeights<W>,
    pub ffn_norm: W,
    pub ffn: Ffn<W>,
}

pub struct ModelWeights<W> {
    pub token_embd: W,
    pub output_norm: W,
    /// `None` when tied to `token_embd`.
    pub output: Option<W>,
    pub layers: Vec<LayerWeights<W>>,
}

impl<W> ModelWeights<W> {
    pub fn output(&self) -> &W {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Binds every tensor `cfg` needs. Each is checked against the layout's shape, then handed
    /// to `load` (name, type, data) to become a backend weight.
    pub fn load<'f>(
        cfg: &Config,
        file: &'f GgufFile,
        mut load: impl FnMut(&str, GgmlType, &[u64], &'f [u8]) -> Result<W>,
    ) -> Result<Self> {
        let mut table = std::collections::HashMap::new();
        for spec in tensor_specs(cfg) {
            let info = file.require_tensor(&spec.name)?;
            if info.dims != spec.dims {
                return Err(ModelError::Tensor {
                    name: spec.name,
                    what: format!("has shape {:?}, the model needs {:?}", info.dims, spec.dims),
                });
            }
            let w = load(&spec.name, info.ty, &info.dims, file.tensor_data(info))?;
            table.insert(spec.name, w);
        }
        let mut take = |name: &str| {
            table.remove(name).ok_or_else(|| ModelError::Tensor {
                name: name.to_owned(),
                what: "missing".into(),
            })
        };
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let mut t = |n: &str| take(&block_tensor(i, n));
            let has = |n: &str| file.tensor(&block_tensor(i, n)).is_some();
            let attn = AttnWeights {
                norm: t("attn_norm.weight")?,
                q: t("attn_q.weight")?,
                k: t("attn_k.weight")?,
                v: t("attn_v.weight")?,
                output: t("attn_output.weight")?,
                qkv_bias: if has("attn_q.bias") {
                    Some([t("attn_q.bias")?, t("attn_k.bias")?, t("attn_v.bias")?])
                } else {
                    None
                },
                q_norm: has("attn_q_norm.weight")
                    .then(|| t("attn_q_norm.weight"))
                    .transpose()?,
                k_norm: has("attn_k_norm.weight")
                    .then(|| t("attn_k_norm.weight"))
                    .transpose()?,
            };
            let ffn_norm = t("ffn_norm.weight")?;
            let ffn = match &cfg.moe {
                None => Ffn::Dense(DenseFfn {
                    gate: t("ffn_gate.weight")?,
                    up: t("ffn_up.weight")?,
                    down: t("ffn_down.weight")?,
                }),
                Some(m) => Ffn::Moe(MoeWeights {
                    router: t("ffn_gate_inp.weight")?,
                    gate: t("ffn_gate_exps.weight")?,
                    up: t("ffn_up_exps.weight")?,
                    down: t("ffn_down_exps.weight")?,
                    n_expert: m.n_expert,
                    n_expert_used: m.n_expert_used,
                    n_ff: m.n_ff_exp,
                }),
            };
            layers.push(LayerWeights {
                attn,
                ffn_norm,
                ffn,
            });
        }
        Ok(ModelWeights {
            token_embd: take("token_embd.weight")?,
            output_norm: take("output_norm.weight")?,
            output: if cfg.tied_embeddings {
                None
            } else {
                Some(take("output.weight")?)
            },
            layers,
        })
    }
}
