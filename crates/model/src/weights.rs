//! Model weights bound by role, generic over how a backend holds a tensor.

use crate::arch::Arch;
use crate::backend::{MoeAct, MoeGating};
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layout::{tensor_specs, TensorId, TensorRole};
use ferrolm_gguf::{GgmlType, GgufFile};

pub struct AttnWeights<W> {
    pub norm: W,
    /// deepseek2: `attn_q` (or `attn_q_b`, after [`MlaWeights::q_a`]).
    pub q: W,
    /// deepseek2: `attn_kv_a_mqa` (the compressed key/value and the shared RoPE key part).
    pub k: W,
    /// deepseek2: `attn_kv_b` (the compressed vector into every head's key and value).
    pub v: W,
    pub output: W,
    /// Biases of q, k, v (qwen2; llama when present).
    pub qkv_bias: Option<[W; 3]>,
    /// The output projection's bias (llama, when present).
    pub output_bias: Option<W>,
    /// qwen3/qwen3moe (per head) and olmoe (whole width).
    pub q_norm: Option<W>,
    pub k_norm: Option<W>,
    /// gpt-oss: a logit per query head that joins each softmax.
    pub sinks: Option<W>,
    /// gpt-oss: this block attends over a sliding window of this many positions.
    pub window: Option<usize>,
    /// deepseek2's latent attention (its `q`, `k`, `v` then mean what their docs say).
    pub mla: Option<MlaWeights<W>>,
}

/// deepseek2's attention weights beyond [`AttnWeights`]'s projections.
pub struct MlaWeights<W> {
    /// `attn_q_a` and `attn_q_a_norm`, when queries go through a low rank (not V2-Lite).
    pub q_a: Option<[W; 2]>,
    /// `attn_kv_a_norm`: the compressed key/value vector's RMS norm.
    pub kv_a_norm: W,
}

pub struct DenseFfn<W> {
    pub gate: W,
    pub up: W,
    pub down: W,
    /// Biases of gate, up and down (llama, when present).
    pub bias: Option<[W; 3]>,
}

/// Experts are stacked: expert `e` owns rows `i*n_ff..(i+1)*n_ff` of `gate`/`up` and rows
/// `i*n_embd..(i+1)*n_embd` of `down`, where `i = e - experts.start`.
pub struct MoeWeights<W> {
    pub router: W,
    pub gate: W,
    pub up: W,
    pub down: W,
    /// Experts the router chooses among.
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff: usize,
    /// The experts these stacks hold, from `experts.start` (all of them, but for a rank of a
    /// tensor split, [`crate::split::Shard`]): a token's slots routed elsewhere add nothing
    /// here.
    pub experts: std::ops::Range<usize>,
    /// How the router's top-k probabilities become expert weights (from the architecture).
    pub gating: MoeGating,
    /// The experts' gated activation (from the architecture).
    pub act: MoeAct,
    /// gpt-oss: the router's bias (`n_expert`), added to its logits.
    pub router_bias: Option<W>,
    /// gpt-oss: the experts' gate, up and down biases, `[width][n_expert]` each (expert `e`'s is
    /// row `e`).
    pub biases: Option<[W; 3]>,
    /// A factor on the chosen experts' weights after gating (deepseek2's
    /// `expert_weights_scale`; 1 elsewhere).
    pub weights_scale: f32,
}

pub enum Ffn<W> {
    Dense(DenseFfn<W>),
    Moe(MoeWeights<W>),
}

pub struct LayerWeights<W> {
    pub attn: AttnWeights<W>,
    pub ffn_norm: W,
    pub ffn: Ffn<W>,
    /// gemma3: RMS norms of the attention's and the FFN's outputs, each applied before the
    /// output joins the residual stream.
    pub attn_post_norm: Option<W>,
    pub ffn_post_norm: Option<W>,
    /// deepseek2: the shared experts, a dense FFN whose output joins the MoE's.
    pub ffn_shexp: Option<DenseFfn<W>>,
}

pub struct ModelWeights<W> {
    pub token_embd: W,
    pub output_norm: W,
    /// llama3's RoPE frequency divisors, when the file has them.
    pub rope_freqs: Option<W>,
    /// `None` when tied to `token_embd`.
    pub output: Option<W>,
    pub layers: Vec<LayerWeights<W>>,
}

impl<W> ModelWeights<W> {
    pub fn output(&self) -> &W {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Binds every tensor `cfg` needs. Each is checked against the layout's shape, then handed
    /// to `load` (id, type, dims, data) to become a backend weight. A file with a tensor the
    /// layout does not bind is refused first ([`crate::known::check_tensors`]).
    pub fn load<'f>(
        cfg: &Config,
        file: &'f GgufFile,
        mut load: impl FnMut(TensorId, GgmlType, &[u64], &'f [u8]) -> Result<W>,
    ) -> Result<Self> {
        crate::known::check_tensors(cfg, file)?;
        let mut table = std::collections::HashMap::new();
        for spec in tensor_specs(cfg) {
            let info = file.require_tensor(&spec.name)?;
            if info.dims != spec.dims {
                return Err(ModelError::Tensor {
                    name: spec.name,
                    what: format!("has shape {:?}, the model needs {:?}", info.dims, spec.dims),
                });
            }
            let w = load(spec.id, info.ty, &info.dims, file.tensor_data(info))?;
            table.insert(spec.id, w);
        }
        let mut take = |id: TensorId| {
            table.remove(&id).ok_or_else(|| ModelError::Tensor {
                name: id.name(),
                what: "missing".into(),
            })
        };
        use TensorRole::*;
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let mut t = |role| take(TensorId::block(i, role));
            let has = |role| file.tensor(&TensorId::block(i, role).name()).is_some();
            let b = cfg.biases;
            let ds = cfg.deepseek2.as_ref();
            let mla = ds
                .map(|ds| -> Result<_> {
                    Ok(MlaWeights {
                        q_a: if ds.q_lora_rank > 0 {
                            Some([t(AttnQA)?, t(AttnQANorm)?])
                        } else {
                            None
                        },
                        kv_a_norm: t(AttnKvANorm)?,
                    })
                })
                .transpose()?;
            let [q, k, v] = match ds {
                Some(ds) => [
                    t(if ds.q_lora_rank > 0 { AttnQB } else { AttnQ })?,
                    t(AttnKvAMqa)?,
                    t(AttnKvB)?,
                ],
                None => [t(AttnQ)?, t(AttnK)?, t(AttnV)?],
            };
            let attn = AttnWeights {
                norm: t(AttnNorm)?,
                q,
                k,
                v,
                output: t(AttnOutput)?,
                qkv_bias: if b.qkv {
                    Some([t(AttnQBias)?, t(AttnKBias)?, t(AttnVBias)?])
                } else {
                    None
                },
                output_bias: b.attn_out.then(|| t(AttnOutputBias)).transpose()?,
                q_norm: has(AttnQNorm).then(|| t(AttnQNorm)).transpose()?,
                k_norm: has(AttnKNorm).then(|| t(AttnKNorm)).transpose()?,
                sinks: has(AttnSinks).then(|| t(AttnSinks)).transpose()?,
                window: cfg.swa.as_ref().filter(|s| s.slides(i)).map(|s| s.window),
                mla,
            };
            let gpt_oss = cfg.arch == Arch::GptOss;
            let ffn_norm = t(if gpt_oss { AttnPostNorm } else { FfnNorm })?;
            let moe = cfg
                .moe
                .as_ref()
                .filter(|_| !ds.is_some_and(|ds| ds.dense(i)));
            let ffn = match moe {
                None => Ffn::Dense(DenseFfn {
                    gate: t(FfnGate)?,
                    up: t(FfnUp)?,
                    down: t(FfnDown)?,
                    bias: if b.ffn {
                        Some([t(FfnGateBias)?, t(FfnUpBias)?, t(FfnDownBias)?])
                    } else {
                        None
                    },
                }),
                Some(m) => Ffn::Moe(MoeWeights {
                    router: t(FfnGateInp)?,
                    gate: t(FfnGateExps)?,
                    up: t(FfnUpExps)?,
                    down: t(FfnDownExps)?,
                    n_expert: m.n_expert,
                    experts: 0..m.n_expert,
                    n_expert_used: m.n_expert_used,
                    n_ff: m.n_ff_exp,
                    gating: match ds {
                        Some(ds) if ds.weights_norm => MoeGating::SoftmaxTopKRenorm,
                        _ => crate::forward::moe_gating(cfg.arch),
                    },
                    act: crate::forward::moe_act(cfg.arch),
                    router_bias: gpt_oss.then(|| t(FfnGateInpBias)).transpose()?,
                    biases: if gpt_oss {
                        Some([t(FfnGateExpsBias)?, t(FfnUpExpsBias)?, t(FfnDownExpsBias)?])
                    } else {
                        None
                    },
                    weights_scale: ds.map_or(1.0, |ds| ds.weights_scale),
                }),
            };
            let ffn_shexp = match (&ffn, ds) {
                (Ffn::Moe(_), Some(_)) => Some(DenseFfn {
                    gate: t(FfnGateShexp)?,
                    up: t(FfnUpShexp)?,
                    down: t(FfnDownShexp)?,
                    bias: None,
                }),
                _ => None,
            };
            let post_norms = cfg.arch == Arch::Gemma3;
            let attn_post_norm = post_norms.then(|| t(AttnPostNorm)).transpose()?;
            let ffn_post_norm = post_norms.then(|| t(FfnPostNorm)).transpose()?;
            layers.push(LayerWeights {
                attn,
                ffn_norm,
                ffn,
                attn_post_norm,
                ffn_post_norm,
                ffn_shexp,
            });
        }
        let global = TensorId::global;
        Ok(ModelWeights {
            token_embd: take(global(TokenEmbd))?,
            output_norm: take(global(OutputNorm))?,
            rope_freqs: if cfg.rope_freqs {
                Some(take(global(RopeFreqs))?)
            } else {
                None
            },
            output: if cfg.tied_embeddings {
                None
            } else {
                Some(take(global(Output))?)
            },
            layers,
        })
    }
}
