//! Named model shapes: real checkpoints' exact hyperparameters, and tiny test variants.
//!
//! The real shapes follow the published Hugging Face configs; the tiny ones match the
//! llama.cpp-made golden files (2 layers, d 256, vocab 512, 8 experts with top-3).

use crate::arch::Arch;
use crate::config::{
    Biases, Config, Deepseek2, MoeConfig, Swa, GEMMA3_SWA_PERIOD, GEMMA3_SWA_ROPE_BASE,
};
use crate::rope::{RopeScaling, RopeScalingKind};

pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub config: Config,
}

/// Every preset name, for help texts and error messages.
pub const NAMES: [&str; 20] = [
    "olmoe-1b-7b",
    "gpt-oss-20b",
    "gemma3-27b",
    "gemma3-4b",
    "gemma3-1b",
    "gemma3-270m",
    "deepseek2-lite",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "smollm2-1.7b",
    "smollm2-135m",
    "qwen3-8b",
    "tiny-llama",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-olmoe",
    "tiny-qwen3moe",
    "tiny-gpt-oss",
    "tiny-gemma3",
    "tiny-deepseek2",
];

fn moe(n_expert: usize, n_expert_used: usize, n_ff_exp: usize) -> Option<MoeConfig> {
    Some(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_exp,
    })
}

/// A config with the even head split; callers override what differs.
fn shape(arch: Arch, n_embd: usize, n_layer: usize, n_head: usize, n_head_kv: usize) -> Config {
    Config {
        arch,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim: n_embd / n_head,
        head_dim_v: n_embd / n_head,
        n_ff: 0,
        moe: None,
        n_vocab: 0,
        n_ctx: 4096,
        rope_freq_base: 10000.0,
        rope_scaling: RopeScaling::default(),
        rope_freqs: false,
        rms_eps: 1e-5,
        tied_embeddings: false,
        biases: Biases {
            qkv: matches!(arch, Arch::Qwen2 | Arch::GptOss),
            attn_out: arch == Arch::GptOss,
            ..Biases::default()
        },
        swa: None,
        deepseek2: None,
    }
}

/// gemma3's shape (head size 256, tied output, RMS epsilon 1e-6, global RoPE base 1e6,
/// sliding blocks over `window` with llama.cpp's fixed period and base).
fn gemma3(n_embd: usize, n_layer: usize, n_head: usize, n_head_kv: usize, window: usize) -> Config {
    Config {
        head_dim: 256,
        head_dim_v: 256,
        n_vocab: 262144,
        n_ctx: 32768,
        rope_freq_base: 1e6,
        rms_eps: 1e-6,
        tied_embeddings: true,
        swa: Some(Swa {
            window,
            period: GEMMA3_SWA_PERIOD,
            rope_base: Some(GEMMA3_SWA_ROPE_BASE),
        }),
        ..shape(Arch::Gemma3, n_embd, n_layer, n_head, n_head_kv)
    }
}

/// deepseek2 with DeepSeek-V2-Lite's attention and RoPE (YaRN ×40 over 4096 with
/// `mscale_all_dim` 0.707, which the converter writes as `yarn_log_multiplier` 0.0707), RMS
/// epsilon 1e-6 and an untied output; `ds` and the head sizes say the rest.
fn deepseek2(
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    heads: [usize; 2],
    ds: Deepseek2,
) -> Config {
    Config {
        head_dim: heads[0],
        head_dim_v: heads[1],
        n_ctx: 163840,
        rms_eps: 1e-6,
        rope_scaling: RopeScaling {
            kind: RopeScalingKind::Yarn,
            factor: 40.0,
            n_ctx_orig: Some(4096),
            yarn_log_mul: 0.0707,
            ..RopeScaling::default()
        },
        deepseek2: Some(ds),
        ..shape(Arch::Deepseek2, n_embd, n_layer, n_head, n_head)
    }
}

/// The preset called `name`, if there is one.
pub fn preset(name: &str) -> Option<Preset> {
    let (about, config) = match name {
        "olmoe-1b-7b" => (
            "OLMoE-1B-7B: 64 experts, top-8",
            Config {
                n_ff: 1024,
                moe: moe(64, 8, 1024),
                n_vocab: 50304,
                ..shape(Arch::Olmoe, 2048, 16, 16, 16)
            },
        ),
        "qwen3-30b-a3b" => (
            "Qwen3-30B-A3B: 128 experts, top-8",
            Config {
                head_dim: 128,
                head_dim_v: 128,
                n_ff: 6144,
                moe: moe(128, 8, 768),
                n_vocab: 151936,
                n_ctx: 40960,
                rope_freq_base: 1e6,
                rms_eps: 1e-6,
                ..shape(Arch::Qwen3Moe, 2048, 48, 32, 4)
            },
        ),
        // More than one H200 holds at Q4_K_M (about 142 GB): the multi-GPU benchmark's model.
        "qwen3-235b-a22b" => (
            "Qwen3-235B-A22B: 128 experts, top-8",
            Config {
                head_dim: 128,
                head_dim_v: 128,
                n_ff: 12288,
                moe: moe(128, 8, 1536),
                n_vocab: 151936,
                n_ctx: 40960,
                rope_freq_base: 1e6,
                rms_eps: 1e-6,
                ..shape(Arch::Qwen3Moe, 4096, 94, 64, 4)
            },
        ),
        "gpt-oss-20b" => (
            "gpt-oss-20b: 32 experts, top-4, sliding window 128 on alternate blocks, YaRN x32",
            Config {
                head_dim: 64,
                head_dim_v: 64,
                n_ff: 2880,
                moe: moe(32, 4, 2880),
                n_vocab: 201088,
                n_ctx: 131072,
                rope_freq_base: 150000.0,
                rope_scaling: RopeScaling {
                    kind: RopeScalingKind::Yarn,
                    factor: 32.0,
                    n_ctx_orig: Some(4096),
                    ..RopeScaling::default()
                },
                swa: Some(Swa {
                    window: 128,
                    period: 2,
                    rope_base: None,
                }),
                ..shape(Arch::GptOss, 2880, 24, 64, 8)
            },
        ),
        "gemma3-4b" => (
            "gemma-3-4b-it's text model: 34 blocks (every 6th global), window 1024, linear RoPE x8",
            Config {
                n_ff: 10240,
                n_ctx: 131072,
                rope_scaling: RopeScaling {
                    kind: RopeScalingKind::Linear,
                    factor: 8.0,
                    ..RopeScaling::default()
                },
                ..gemma3(2560, 34, 8, 4, 1024)
            },
        ),
        "gemma3-27b" => (
            "gemma-3-27b-it's text model: 62 blocks, head size 128, queries scaled by 1/sqrt(168)",
            Config {
                head_dim: 128,
                head_dim_v: 128,
                n_ff: 21504,
                n_ctx: 131072,
                rope_scaling: RopeScaling {
                    kind: RopeScalingKind::Linear,
                    factor: 8.0,
                    ..RopeScaling::default()
                },
                ..gemma3(5376, 62, 32, 16, 1024)
            },
        ),
        "gemma3-1b" => (
            "gemma-3-1b-it: 26 blocks (every 6th global), window 512",
            Config {
                n_ff: 6912,
                ..gemma3(1152, 26, 4, 1, 512)
            },
        ),
        "gemma3-270m" => (
            "gemma-3-270m: 18 blocks (every 6th global), window 512",
            Config {
                n_ff: 2048,
                ..gemma3(640, 18, 4, 1, 512)
            },
        ),
        "deepseek2-lite" => (
            "DeepSeek-V2-Lite: 27 blocks (1 dense, then 64 experts top-6 + 2 shared), \
             latent attention (kv rank 512, heads 128+64 / 128), YaRN x40",
            Config {
                n_ff: 10944,
                moe: moe(64, 6, 1408),
                n_vocab: 102400,
                ..deepseek2(
                    2048,
                    27,
                    16,
                    [192, 128],
                    Deepseek2 {
                        q_lora_rank: 0,
                        kv_lora_rank: 512,
                        n_rot: 64,
                        n_dense_lead: 1,
                        n_shared: 2,
                        weights_scale: 1.0,
                        weights_norm: false,
                    },
                )
            },
        ),
        "smollm2-1.7b" => (
            "SmolLM2-1.7B (llama, tied embeddings)",
            Config {
                n_ff: 8192,
                n_vocab: 49152,
                n_ctx: 8192,
                rope_freq_base: 130000.0,
                tied_embeddings: true,
                ..shape(Arch::Llama, 2048, 24, 32, 32)
            },
        ),
        "smollm2-135m" => (
            "SmolLM2-135M (llama, tied embeddings)",
            Config {
                n_ff: 1536,
                n_vocab: 49152,
                n_ctx: 8192,
                rope_freq_base: 100000.0,
                tied_embeddings: true,
                ..shape(Arch::Llama, 576, 30, 9, 3)
            },
        ),
        "qwen3-8b" => (
            "Qwen3-8B",
            Config {
                head_dim: 128,
                head_dim_v: 128,
                n_ff: 12288,
                n_vocab: 151936,
                n_ctx: 40960,
                rope_freq_base: 1e6,
                rms_eps: 1e-6,
                ..shape(Arch::Qwen3, 4096, 36, 32, 8)
            },
        ),
        "tiny-llama" => (
            "2-layer llama, tied embeddings",
            Config {
                n_ff: 512,
                n_vocab: 512,
                tied_embeddings: true,
                ..shape(Arch::Llama, 256, 2, 4, 2)
            },
        ),
        "tiny-qwen2" => (
            "2-layer qwen2 with q/k/v biases",
            Config {
                n_ff: 512,
                n_vocab: 512,
                rope_freq_base: 1e6,
                rms_eps: 1e-6,
                ..shape(Arch::Qwen2, 256, 2, 4, 2)
            },
        ),
        "tiny-qwen3" => (
            "2-layer qwen3",
            Config {
                n_ff: 512,
                n_vocab: 512,
                rope_freq_base: 1e6,
                rms_eps: 1e-6,
                ..shape(Arch::Qwen3, 256, 2, 4, 2)
            },
        ),
        "tiny-olmoe" => (
            "2-layer olmoe, 8 experts, top-3",
            Config {
                n_ff: 256,
                moe: moe(8, 3, 256),
                n_vocab: 512,
                ..shape(Arch::Olmoe, 256, 2, 4, 4)
            },
        ),
        "tiny-qwen3moe" => (
            "2-layer qwen3moe, 8 experts, top-3",
            Config {
                n_ff: 256,
                moe: moe(8, 3, 256),
                n_vocab: 512,
                rope_freq_base: 1e6,
                rms_eps: 1e-6,
                ..shape(Arch::Qwen3Moe, 256, 2, 4, 2)
            },
        ),
        "tiny-gpt-oss" => (
            "2-layer gpt-oss (block 0 slides over 16), 8 experts, top-4, YaRN x32",
            Config {
                n_ff: 256,
                moe: moe(8, 4, 256),
                n_vocab: 512,
                n_ctx: 131072,
                rope_freq_base: 150000.0,
                rope_scaling: RopeScaling {
                    kind: RopeScalingKind::Yarn,
                    factor: 32.0,
                    n_ctx_orig: Some(4096),
                    ..RopeScaling::default()
                },
                swa: Some(Swa {
                    window: 16,
                    period: 2,
                    rope_base: None,
                }),
                head_dim: 64,
                head_dim_v: 64,
                ..shape(Arch::GptOss, 256, 2, 8, 2)
            },
        ),
        "tiny-gemma3" => (
            "7-block gemma3 (block 5 global, the others over a window of 16), linear RoPE x8",
            Config {
                head_dim: 128,
                head_dim_v: 128,
                n_ff: 512,
                n_vocab: 512,
                n_ctx: 131072,
                rope_scaling: RopeScaling {
                    kind: RopeScalingKind::Linear,
                    factor: 8.0,
                    ..RopeScaling::default()
                },
                ..gemma3(256, 7, 4, 2, 16)
            },
        ),
        "tiny-deepseek2" => (
            "4-block deepseek2 (1 dense, then 8 experts top-3 + 2 shared), kv rank 256, \
             heads 64+32 / 64, YaRN x40",
            Config {
                n_ff: 512,
                moe: moe(8, 3, 256),
                n_vocab: 512,
                ..deepseek2(
                    256,
                    4,
                    4,
                    [96, 64],
                    Deepseek2 {
                        q_lora_rank: 0,
                        kv_lora_rank: 256,
                        n_rot: 32,
                        n_dense_lead: 1,
                        n_shared: 2,
                        weights_scale: 2.0,
                        weights_norm: false,
                    },
                )
            },
        ),
        _ => return None,
    };
    let name = NAMES.iter().copied().find(|n| *n == name)?;
    Some(Preset {
        name,
        about,
        config,
    })
}
