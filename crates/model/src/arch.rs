//! The architectures ferrolm knows, by their `general.architecture` names.

use crate::error::{ModelError, Result};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Llama 2/3, SmolLM2: the plain pre-norm transformer.
    Llama,
    /// Qwen2: Llama plus biases on the q/k/v projections.
    Qwen2,
    /// Qwen3: Llama plus per-head RMS norms on q and k (weights of size head_dim).
    Qwen3,
    /// OLMoE: MoE FFN; q/k RMS norms over the whole projected width.
    Olmoe,
    /// Qwen3-MoE: Qwen3 attention with an MoE FFN whose experts have their own width.
    Qwen3Moe,
    /// gpt-oss (llama.cpp's `LLM_ARCH_OPENAI_MOE`): biased projections, attention sinks,
    /// sliding-window attention on alternate blocks, YaRN RoPE, and an MoE with biased experts
    /// (MXFP4 in released files), `swiglu_oai` and a softmax over the chosen experts' logits.
    GptOss,
    /// Gemma 3: embeddings scaled by `sqrt(n_embd)`, per-head q/k RMS norms, RMS norms after
    /// attention and after the FFN, a GELU-gated FFN, and five sliding-window blocks (RoPE base
    /// 10000, unscaled) to every global one.
    Gemma3,
    /// DeepSeek-V2 (and V2-Lite): multi-head latent attention (keys and values decompressed
    /// from a low-rank vector, a RoPE part shared by the heads, YaRN with DeepSeek's mscale),
    /// leading dense blocks, then a softmax-gated MoE with shared experts.
    Deepseek2,
}

impl Arch {
    pub const ALL: [Arch; 8] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Olmoe,
        Arch::Qwen3Moe,
        Arch::GptOss,
        Arch::Gemma3,
        Arch::Deepseek2,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Olmoe => "olmoe",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::GptOss => "gpt-oss",
            Arch::Gemma3 => "gemma3",
            Arch::Deepseek2 => "deepseek2",
        }
    }

    /// Parses a `general.architecture` value; the error lists what is supported.
    pub fn from_name(name: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| ModelError::UnknownArch {
                name: name.to_owned(),
                supported: Self::ALL.map(Arch::name).join(", "),
            })
    }

    pub const fn is_moe(self) -> bool {
        matches!(
            self,
            Arch::Olmoe | Arch::Qwen3Moe | Arch::GptOss | Arch::Deepseek2
        )
    }

    /// Whether `<arch>.expert_count` may make the FFN a mixture of experts: always for the MoE
    /// architectures, and for llama (Mixtral-style files).
    pub const fn allows_moe(self) -> bool {
        matches!(
            self,
            Arch::Llama | Arch::Olmoe | Arch::Qwen3Moe | Arch::Deepseek2
        )
    }

    /// Tensors a file of this architecture may carry that no computation uses, with the
    /// reason; each a name within a block (`attn_rot_embd.weight`) or a global name. llama.cpp
    /// refuses a file with a tensor it does not load ("wrong number of tensors"), so none of
    /// these architectures lists any: a new one declares here what llama.cpp skips for it.
    pub const fn unused_tensors(self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// `<arch>.*` keys this architecture reads beyond the ones every architecture reads
    /// ([`crate::known`]).
    pub const fn extra_keys(self) -> &'static [&'static str] {
        match self {
            // Read by `Config::from_gguf` (the SWA base is refused unless it equals the base).
            Arch::GptOss => &[
                "attention.sliding_window",
                "attention.sliding_window_pattern",
                "rope.freq_base_swa",
            ],
            // The window is required; llama.cpp fixes the pattern (every 6th block global) and
            // the sliding blocks' RoPE base (10000) for gemma3, so neither is a key here.
            Arch::Gemma3 => &["attention.sliding_window"],
            Arch::Deepseek2 => &crate::deepseek2::KEYS,
            _ => &[],
        }
    }

    /// Whether `output.weight` may be absent, the output then sharing `token_embd.weight`.
    pub const fn allows_tied_output(self) -> bool {
        !matches!(self, Arch::Olmoe | Arch::GptOss)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
