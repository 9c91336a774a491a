//! Hyperparameters, read from and written to the `<arch>.*` GGUF keys llama.cpp uses.

use crate::arch::Arch;
use crate::backend::Rope;
pub use crate::deepseek2::Deepseek2;
use crate::error::{ModelError, Result};
use crate::rope::RopeScaling;
use ferrolm_gguf::{GgufFile, GgufWriter};

/// The mixture-of-experts part of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// `<arch>.expert_count`
    pub n_expert: usize,
    /// `<arch>.expert_used_count`: experts each token is routed to.
    pub n_expert_used: usize,
    /// Width of one expert's FFN: `<arch>.expert_feed_forward_length` for qwen3moe,
    /// `<arch>.feed_forward_length` for olmoe.
    pub n_ff_exp: usize,
}

/// Sliding-window attention on some blocks (gpt-oss, gemma3), as llama.cpp's standard SWA.
#[derive(Clone, Debug, PartialEq)]
pub struct Swa {
    /// `<arch>.attention.sliding_window`: a token sees itself and the `window - 1` before it.
    pub window: usize,
    /// `<arch>.attention.sliding_window_pattern` (gpt-oss: 2 when absent; gemma3: always 6):
    /// in every run of `period` blocks the last attends over everything and the others over
    /// the window (llama.cpp's `set_swa_pattern`); 0 makes every block slide.
    pub period: usize,
    /// The sliding blocks' own RoPE base, unscaled (gemma3: 10000, llama.cpp's
    /// `rope_freq_base_train_swa` with `rope_freq_scale_train_swa` 1); `None`: they rotate as
    /// the global blocks do.
    pub rope_base: Option<f32>,
}

impl Swa {
    /// Whether block `layer` attends over the window.
    pub fn slides(&self, layer: usize) -> bool {
        self.period == 0 || layer % self.period < self.period - 1
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    /// `<arch>.embedding_length`
    pub n_embd: usize,
    /// `<arch>.block_count`
    pub n_layer: usize,
    /// `<arch>.attention.head_count`
    pub n_head: usize,
    /// `<arch>.attention.head_count_kv` (defaults to `n_head`)
    pub n_head_kv: usize,
    /// `<arch>.attention.key_length` (defaults to `n_embd / n_head`)
    pub head_dim: usize,
    /// `<arch>.attention.value_length` (defaults to `n_embd / n_head`)
    pub head_dim_v: usize,
    /// `<arch>.feed_forward_length`: the dense FFN width (for olmoe, each expert's).
    pub n_ff: usize,
    pub moe: Option<MoeConfig>,
    /// `<arch>.vocab_size`, else the tokenizer's token count, else `token_embd`'s rows.
    pub n_vocab: usize,
    /// `<arch>.context_length`
    pub n_ctx: usize,
    /// `<arch>.rope.freq_base` (defaults to 10000)
    pub rope_freq_base: f32,
    /// `<arch>.rope.scaling.*`
    pub rope_scaling: RopeScaling,
    /// The file has `rope_freqs.weight`, llama3's per-pair frequency divisors.
    pub rope_freqs: bool,
    /// `<arch>.attention.layer_norm_rms_epsilon`
    pub rms_eps: f32,
    /// No `output.weight`: the output projection reuses `token_embd.weight`.
    pub tied_embeddings: bool,
    /// Which optional biases the blocks have.
    pub biases: Biases,
    /// Sliding-window attention, where the architecture has it (gpt-oss, gemma3).
    pub swa: Option<Swa>,
    /// deepseek2's latent attention and MoE extras.
    pub deepseek2: Option<Deepseek2>,
}

/// llama.cpp's gemma3 period: five sliding blocks, then a global one.
pub const GEMMA3_SWA_PERIOD: usize = 6;
/// llama.cpp's RoPE base of gemma3's sliding blocks.
pub const GEMMA3_SWA_ROPE_BASE: f32 = 10000.0;

/// Projection biases. qwen2 always has q/k/v biases; llama may have any of these (llama.cpp
/// loads each as optional); the others have none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Biases {
    /// `attn_{q,k,v}.bias`
    pub qkv: bool,
    /// `attn_output.bias`
    pub attn_out: bool,
    /// `ffn_{gate,up,down}.bias`
    pub ffn: bool,
}

/// The full key for hyperparameter `suffix` of `arch`, e.g. `llama.block_count`.
pub fn key(arch: Arch, suffix: &str) -> String {
    format!("{}.{suffix}", arch.name())
}

impl Config {
    /// Reads and validates the hyperparameters of a GGUF model.
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let arch = Arch::from_name(f.architecture()?)?;
        let k = |s: &str| key(arch, s);
        let opt = |s: &str| -> Result<Option<usize>> {
            let full = k(s);
            match f.get(&full) {
                None => Ok(None),
                Some(_) => Ok(Some(f.get_usize(&full)?)),
            }
        };
        let n_embd = f.get_usize(&k("embedding_length"))?;
        let n_head = f.get_usize(&k("attention.head_count"))?;
        // Without explicit head sizes, llama.cpp splits the embedding evenly over the heads.
        let even_split = n_embd.checked_div(n_head).unwrap_or(0);
        // gpt-oss's experts are its only FFN: llama.cpp reads their width alone.
        let n_ff = match arch {
            Arch::GptOss => match opt("feed_forward_length")? {
                Some(v) => v,
                None => f.get_usize(&k("expert_feed_forward_length"))?,
            },
            _ => f.get_usize(&k("feed_forward_length"))?,
        };
        // Mixtral-style files are llama with experts; llama.cpp reads a count of 0 as dense.
        let moe = if arch.is_moe() || (arch.allows_moe() && opt("expert_count")? > Some(0)) {
            let n_expert = f.get_usize(&k("expert_count"))?;
            let n_expert_used = f.get_usize(&k("expert_used_count"))?;
            let n_ff_exp = match arch {
                Arch::Qwen3Moe => opt("expert_feed_forward_length")?
                    .unwrap_or(n_ff.checked_div(n_expert_used).unwrap_or(0)),
                Arch::GptOss | Arch::Deepseek2 => f.get_usize(&k("expert_feed_forward_length"))?,
                _ => n_ff,
            };
            Some(MoeConfig {
                n_expert,
                n_expert_used,
                n_ff_exp,
            })
        } else {
            None
        };
        let n_vocab = match opt("vocab_size")? {
            Some(v) => v,
            None => match f.get("tokenizer.ggml.tokens") {
                Some(_) => f.get_array("tokenizer.ggml.tokens")?.len(),
                None => {
                    let t = f.require_tensor("token_embd.weight")?;
                    t.dims.get(1).copied().unwrap_or(0) as usize
                }
            },
        };
        let rope_key = k("rope.freq_base");
        let head_dim = opt("attention.key_length")?.unwrap_or(even_split);
        // Partial rotary embeddings are not implemented; llama.cpp itself requires the whole
        // (even-split) head for llama.
        // deepseek2 rotates a tail of each head: its own reader checks the count.
        if let Some(n_rot) = opt("rope.dimension_count")?.filter(|_| arch != Arch::Deepseek2) {
            let want = if arch == Arch::Llama {
                even_split
            } else {
                head_dim
            };
            if n_rot != want {
                return Err(ModelError::Hparam {
                    key: k("rope.dimension_count"),
                    what: format!(
                        "{n_rot} rotated dimensions of {want}: only whole-head RoPE is supported"
                    ),
                });
            }
        }
        let has = |name: &str| f.tensor(name).is_some();
        let n_layer = f.get_usize(&k("block_count"))?;
        let cfg = Config {
            arch,
            n_embd,
            n_layer,
            n_head,
            n_head_kv: opt("attention.head_count_kv")?.unwrap_or(n_head),
            head_dim,
            head_dim_v: opt("attention.value_length")?.unwrap_or(even_split),
            n_ff,
            moe,
            n_vocab,
            n_ctx: f.get_usize(&k("context_length"))?,
            rope_freq_base: match f.get(&rope_key) {
                Some(_) => f.get_f32(&rope_key)?,
                None => 10000.0,
            },
            rope_scaling: RopeScaling::from_gguf(f, arch)?,
            // llama.cpp binds llama3's factors for llama only; elsewhere the tensor is unknown.
            rope_freqs: arch == Arch::Llama && has("rope_freqs.weight"),
            rms_eps: f.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
            tied_embeddings: !has("output.weight"),
            biases: match arch {
                Arch::Qwen2 => Biases {
                    qkv: true,
                    ..Biases::default()
                },
                Arch::Llama => Biases {
                    qkv: has("blk.0.attn_q.bias"),
                    attn_out: has("blk.0.attn_output.bias"),
                    ffn: has("blk.0.ffn_gate.bias"),
                },
                Arch::GptOss => Biases {
                    qkv: true,
                    attn_out: true,
                    ffn: false,
                },
                _ => Biases::default(),
            },
            swa: match arch {
                Arch::GptOss => Some(read_swa(f, arch, opt("attention.sliding_window")?)?),
                Arch::Gemma3 => Some(Swa {
                    window: required_window(arch, opt("attention.sliding_window")?)?,
                    period: GEMMA3_SWA_PERIOD,
                    rope_base: Some(GEMMA3_SWA_ROPE_BASE),
                }),
                _ => None,
            },
            deepseek2: match arch {
                Arch::Deepseek2 => Some(Deepseek2::from_gguf(f, n_layer, n_vocab, head_dim)?),
                _ => None,
            },
        };
        if arch == Arch::GptOss {
            check_gpt_oss_rope(f, &cfg)?;
        }
        crate::known::check_keys(f, arch)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks `block_count` against the blocks `f` has tensors for. Every per-block structure
    /// (tensor specs, layers, caches) is sized by it: a loader calls this before allocating
    /// anything per block, so a file claiming 2^32 blocks fails at once.
    pub fn check_blocks(&self, f: &GgufFile) -> Result<()> {
        let blocks = f
            .tensors()
            .iter()
            .filter_map(|t| {
                t.name
                    .strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .max()
            .map_or(0, |last| last + 1);
        if self.n_layer > blocks {
            return Err(ModelError::Hparam {
                key: key(self.arch, "block_count"),
                what: format!(
                    "is {}, but the file has tensors for {blocks} blocks; the file is corrupt or incomplete",
                    self.n_layer
                ),
            });
        }
        Ok(())
    }

    /// Checks the hyperparameters are usable together; errors name the offending key.
    pub fn validate(&self) -> Result<()> {
        let bad = |suffix: &str, what: String| {
            Err(ModelError::Hparam {
                key: key(self.arch, suffix),
                what,
            })
        };
        let positive = [
            ("embedding_length", self.n_embd),
            ("block_count", self.n_layer),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim),
            ("attention.value_length", self.head_dim_v),
            ("feed_forward_length", self.n_ff),
            ("vocab_size", self.n_vocab),
            ("context_length", self.n_ctx),
        ];
        for (suffix, v) in positive {
            if v == 0 {
                return bad(suffix, "must be positive".into());
            }
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(
                "attention.head_count_kv",
                format!(
                    "{} does not divide head_count {}",
                    self.n_head_kv, self.n_head
                ),
            );
        }
        if !(self.rope_freq_base.is_finite() && self.rope_freq_base > 0.0) {
            return bad(
                "rope.freq_base",
                format!("{} is not a positive number", self.rope_freq_base),
            );
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return bad(
                "attention.layer_norm_rms_epsilon",
                format!("{} is not a positive number", self.rms_eps),
            );
        }
        match (&self.moe, self.arch.is_moe()) {
            (None, true) => return bad("expert_count", "missing for an MoE architecture".into()),
            (Some(_), false) if !self.arch.allows_moe() => {
                return bad(
                    "expert_count",
                    format!("{} is not an MoE architecture", self.arch),
                )
            }
            (Some(m), _) => {
                if m.n_expert == 0 {
                    return bad("expert_count", "must be positive".into());
                }
                if m.n_expert_used == 0 || m.n_expert_used > m.n_expert {
                    return bad(
                        "expert_used_count",
                        format!("{} is not in 1..={}", m.n_expert_used, m.n_expert),
                    );
                }
                if m.n_ff_exp == 0 {
                    return bad("expert_feed_forward_length", "must be positive".into());
                }
                if self.arch == Arch::Olmoe && m.n_ff_exp != self.n_ff {
                    return bad(
                        "feed_forward_length",
                        "olmoe experts are feed_forward_length wide".into(),
                    );
                }
            }
            (None, false) => {}
        }
        if let Some(swa) = &self.swa {
            if swa.window == 0 {
                return bad("attention.sliding_window", "must be positive".into());
            }
        }
        if let Some(ds) = &self.deepseek2 {
            ds.validate(self)?;
        }
        if self.tied_embeddings && !self.arch.allows_tied_output() {
            return Err(ModelError::Tensor {
                name: "output.weight".into(),
                what: format!("required by {}", self.arch),
            });
        }
        Ok(())
    }

    /// Writes the hyperparameters as llama.cpp's converter does (integers as u32).
    pub fn write_to(&self, w: &mut GgufWriter) {
        let k = |s: &str| key(self.arch, s);
        let u = |v: usize| v as u32;
        w.set(&k("context_length"), u(self.n_ctx));
        w.set(&k("embedding_length"), u(self.n_embd));
        w.set(&k("block_count"), u(self.n_layer));
        w.set(&k("feed_forward_length"), u(self.n_ff));
        w.set(&k("attention.head_count"), u(self.n_head));
        w.set(&k("attention.head_count_kv"), u(self.n_head_kv));
        w.set(&k("rope.freq_base"), self.rope_freq_base);
        w.set(&k("attention.layer_norm_rms_epsilon"), self.rms_eps);
        self.rope_scaling.write_to(w, self.arch);
        // Qwen3 checkpoints carry an explicit head_dim, and llama.cpp's converter writes it.
        let explicit = matches!(
            self.arch,
            Arch::Qwen3 | Arch::Qwen3Moe | Arch::GptOss | Arch::Gemma3 | Arch::Deepseek2
        );
        let even_split = self.n_embd / self.n_head;
        if explicit || self.head_dim != even_split || self.head_dim_v != even_split {
            w.set(&k("attention.key_length"), u(self.head_dim));
            w.set(&k("attention.value_length"), u(self.head_dim_v));
        }
        if let Some(m) = &self.moe {
            w.set(&k("expert_count"), u(m.n_expert));
            w.set(&k("expert_used_count"), u(m.n_expert_used));
            if matches!(self.arch, Arch::Qwen3Moe | Arch::GptOss | Arch::Deepseek2) {
                w.set(&k("expert_feed_forward_length"), u(m.n_ff_exp));
            }
        }
        if let Some(swa) = &self.swa {
            w.set(&k("attention.sliding_window"), u(swa.window));
            // gemma3's period is fixed by llama.cpp, not a key.
            if self.arch == Arch::GptOss && swa.period != 2 {
                w.set(&k("attention.sliding_window_pattern"), u(swa.period));
            }
        }
        if self.arch == Arch::GptOss {
            w.set(&k("rope.dimension_count"), u(self.head_dim));
        }
        if let Some(ds) = &self.deepseek2 {
            ds.write_to(w);
        }
        w.set(&k("vocab_size"), u(self.n_vocab));
    }

    /// What RoPE does in the global blocks: the mode of the architecture, the base and the
    /// scaling.
    pub fn rope(&self) -> Rope {
        let mode = crate::forward::rope_mode(self.arch);
        self.rope_scaling
            .params(mode, self.rope_freq_base, self.rope_dims(), self.n_ctx)
    }

    /// Rotated dimensions of a head: its tail of `rope.dimension_count` for deepseek2, else
    /// the whole head.
    pub fn rope_dims(&self) -> usize {
        self.deepseek2.as_ref().map_or(self.head_dim, |ds| ds.n_rot)
    }

    /// What RoPE does in block `layer`: a sliding block with a base of its own (gemma3) rotates
    /// with that base and no frequency scaling, as llama.cpp's `get_rope_freq_base` /
    /// `get_rope_freq_scale` give it (YaRN's correction dimensions from that base, as ggml
    /// derives them per call); every other block as [`Self::rope`].
    pub fn rope_for(&self, layer: usize) -> Rope {
        let own_base = self
            .swa
            .as_ref()
            .filter(|s| s.slides(layer))
            .and_then(|s| s.rope_base);
        let Some(base) = own_base else {
            return self.rope();
        };
        let mode = crate::forward::rope_mode(self.arch);
        let mut r = self
            .rope_scaling
            .params(mode, base, self.head_dim, self.n_ctx);
        r.freq_scale = 1.0;
        r
    }

    /// The factor on the residual stream's start: gemma3 scales its token embeddings by
    /// `sqrt(n_embd)` (in f32, as llama.cpp's `ggml_scale`).
    pub fn embd_scale(&self) -> Option<f32> {
        (self.arch == Arch::Gemma3).then(|| (self.n_embd as f32).sqrt())
    }

    /// A factor on the queries after RoPE, for attention scales other than the
    /// `1 / sqrt(head_dim)` every attention op applies. llama.cpp scales gemma3's queries by
    /// `1 / sqrt(n_embd / n_head)` when the file has 62 blocks (its "27B" type, Gemma's
    /// `query_pre_attn_scalar`) and by `1 / sqrt(key_length)` otherwise, which is the default.
    pub fn q_scale(&self) -> Option<f32> {
        if self.arch != Arch::Gemma3 || self.n_layer != 62 {
            return None;
        }
        let want = 1.0 / ((self.n_embd / self.n_head) as f32).sqrt();
        Some(want * (self.head_dim as f32).sqrt())
    }

    /// The factor on `q·k` where it is not `1 / sqrt(head_dim)`: deepseek2's `mscale² /
    /// sqrt(key_length)` (llama.cpp's `kq_scale`, in its f32 order).
    pub fn kq_scale(&self) -> Option<f32> {
        (self.arch == Arch::Deepseek2).then(|| {
            let m = self.rope_scaling.deepseek2_mscale();
            m * m / (self.head_dim as f32).sqrt()
        })
    }

    /// Query heads sharing one key/value head.
    pub fn n_gqa(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    pub fn n_expert(&self) -> usize {
        self.moe.as_ref().map_or(0, |m| m.n_expert)
    }
}

/// The sliding window, required for gpt-oss and gemma3 (as in llama.cpp for gpt-oss; newer
/// llama.cpp runs a gemma3 file without one as all-global, a variant ferrolm does not
/// implement).
fn required_window(arch: Arch, window: Option<usize>) -> Result<usize> {
    window.ok_or_else(|| ModelError::Hparam {
        key: key(arch, "attention.sliding_window"),
        what: format!("missing ({arch} attends over a sliding window on some blocks)"),
    })
}

/// gpt-oss's sliding window and its pattern (a period; llama.cpp also takes a per-block array,
/// which ferrolm refuses by name rather than misread).
fn read_swa(f: &GgufFile, arch: Arch, window: Option<usize>) -> Result<Swa> {
    let window = required_window(arch, window)?;
    let pattern = key(arch, "attention.sliding_window_pattern");
    let period = match f.get(&pattern) {
        None => 2,
        Some(_) => f.get_usize(&pattern).map_err(|_| ModelError::Hparam {
            key: pattern.clone(),
            what: "only a period (an integer) is supported, not a per-block array".into(),
        })?,
    };
    Ok(Swa {
        window,
        period,
        rope_base: None,
    })
}

/// A RoPE base of their own for gpt-oss's sliding blocks (`rope.freq_base_swa`, which
/// llama.cpp reads) is not implemented: refused by name unless it equals the base.
fn check_gpt_oss_rope(f: &GgufFile, cfg: &Config) -> Result<()> {
    let base_swa = key(cfg.arch, "rope.freq_base_swa");
    if f.get(&base_swa).is_some() && f.get_f32(&base_swa)? != cfg.rope_freq_base {
        return Err(ModelError::Hparam {
            key: base_swa,
            what: "a RoPE base of its own for the sliding blocks is not supported".into(),
        });
    }
    Ok(())
}
