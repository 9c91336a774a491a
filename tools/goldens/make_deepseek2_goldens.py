#!/usr/bin/env python3
"""Tiny random deepseek2 models and their llama.cpp goldens (tests: crates/cli/tests/deepseek2.rs).

The model has what a DeepSeek-V2-Lite GGUF (llama.cpp's legacy `attn_kv_b` form) has, small:
4 blocks, the first dense (`leading_dense_block_count` 1) and the others an MoE of 8 experts
(top 3, softmax gating without renormalization, `expert_weights_scale` 2 so the scale shows)
plus 2 shared experts; d 256, 4 heads with multi-head latent attention: queries straight from
`attn_q` (q_lora_rank 0, as the Lite), keys and values decompressed from a 256-wide compressed
vector (`attn_kv_a_mqa`, normed by `attn_kv_a_norm`, through `attn_kv_b`), key heads of 96 (64
unrotated + a 32-dim RoPE part shared by every head), value heads of 64; RoPE in llama.cpp's
normal (adjacent-pair) mode with V2-Lite's YaRN (factor 40 over 4096, `yarn_log_multiplier`
0.0707, so the attention scale carries DeepSeek's mscale²); an untied output, vocab 512,
no_vocab.

The recipe (`tiny-deepseek2.recipe.json`, golden_lib.py) is made into three models:

- `tiny-deepseek2-f32`: the file as declared, golden in llama.cpp's precise configuration
  (flash attention off, F32 KV cache);
- `tiny-deepseek2-q8_0`, `tiny-deepseek2-q4_k_m`: llama.cpp's quantizer, goldens with
  llama.cpp's defaults (flash attention on the CPU, F16 KV cache).

A second recipe, `tiny-deepseek2-qlora.recipe.json`, is the same model with its queries through
a rank of 256 (`attn_q_a` → `attn_q_a_norm` → `attn_q_b`, as the full DeepSeek-V2), made into
`tiny-deepseek2-qlora-f32` (precise) and `tiny-deepseek2-qlora-q8_0` (defaults).

Goldens as golden_lib.py makes them; prompts of 7, 33 and 100 random ids, 16 greedy steps;
logits to 6 significant digits. Each golden holds the sha256 of the model file llama.cpp ran.

usage: make_deepseek2_goldens.py [--ferrolm BIN] OUT_DIR   (run with /work/venv-llama/bin/python)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import DEFAULTS, PRECISE, Recipe, make_arch_goldens  # noqa: E402

ARCH = "deepseek2"
D, N_LAYER, N_DENSE, N_HEAD, N_FF = 256, 4, 1, 4, 512
NOPE, ROT, V_HEAD, KV_RANK = 64, 32, 64, 256
N_EXPERT, N_USED, N_SHARED, N_FF_EXP = 8, 3, 2, 256
N_VOCAB = 512
PROMPTS, GREEDY = (7, 33, 100), 16


def recipe(seed=0, q_lora=0):
    r = Recipe(seed, "tiny deepseek2 (tools/goldens/make_deepseek2_goldens.py)")
    r.kv("general.architecture", "string", ARCH)
    r.kv("general.name", "string", "tiny-deepseek2-synthetic")
    for key, ty, v in (("context_length", "u32", 163840), ("embedding_length", "u32", D),
                       ("block_count", "u32", N_LAYER), ("feed_forward_length", "u32", N_FF),
                       ("attention.head_count", "u32", N_HEAD),
                       ("attention.head_count_kv", "u32", N_HEAD),
                       ("attention.key_length", "u32", NOPE + ROT),
                       ("attention.value_length", "u32", V_HEAD),
                       ("rope.freq_base", "f32", 10000.0),
                       ("attention.layer_norm_rms_epsilon", "f32", 1e-6),
                       ("rope.scaling.type", "string", "yarn"),
                       ("rope.scaling.factor", "f32", 40.0),
                       ("rope.scaling.original_context_length", "u32", 4096),
                       ("rope.scaling.yarn_log_multiplier", "f32", 0.0707),
                       ("expert_count", "u32", N_EXPERT),
                       ("expert_used_count", "u32", N_USED),
                       ("leading_dense_block_count", "u32", N_DENSE),
                       ("attention.q_lora_rank", "u32", q_lora),
                       ("attention.kv_lora_rank", "u32", KV_RANK),
                       ("rope.dimension_count", "u32", ROT),
                       ("expert_feed_forward_length", "u32", N_FF_EXP),
                       ("expert_shared_count", "u32", N_SHARED),
                       ("expert_weights_scale", "f32", 2.0),
                       ("expert_weights_norm", "bool", False),
                       ("expert_gating_func", "u32", 1),
                       ("vocab_size", "u32", N_VOCAB)):
        r.kv(f"{ARCH}.{key}", ty, v)
    r.kv("tokenizer.ggml.model", "string", "no_vocab")
    r.kv("general.file_type", "u32", 0)

    def mat(name, rows, cols):  # ggml dims [cols, rows]
        r.normal(name, (cols, rows), 0, 1 / math.sqrt(cols))

    def norm(name, n):
        r.normal(name, (n,), 1, 0.1)

    def experts(name, rows, cols):  # ggml dims [cols, rows, experts]
        r.normal(name, (cols, rows, N_EXPERT), 0, 1 / math.sqrt(cols))

    k_head = NOPE + ROT
    r.normal("token_embd.weight", (D, N_VOCAB), 0, 1)
    norm("output_norm.weight", D)
    mat("output.weight", N_VOCAB, D)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", D)
        if q_lora:
            mat(b + "attn_q_a.weight", q_lora, D)
            norm(b + "attn_q_a_norm.weight", q_lora)
            mat(b + "attn_q_b.weight", N_HEAD * k_head, q_lora)
        else:
            mat(b + "attn_q.weight", N_HEAD * k_head, D)
        mat(b + "attn_kv_a_mqa.weight", KV_RANK + ROT, D)
        norm(b + "attn_kv_a_norm.weight", KV_RANK)
        mat(b + "attn_kv_b.weight", N_HEAD * (NOPE + V_HEAD), KV_RANK)
        mat(b + "attn_output.weight", D, N_HEAD * V_HEAD)
        norm(b + "ffn_norm.weight", D)
        if i < N_DENSE:
            mat(b + "ffn_gate.weight", N_FF, D)
            mat(b + "ffn_up.weight", N_FF, D)
            mat(b + "ffn_down.weight", D, N_FF)
        else:
            mat(b + "ffn_gate_inp.weight", N_EXPERT, D)
            experts(b + "ffn_gate_exps.weight", N_FF_EXP, D)
            experts(b + "ffn_up_exps.weight", N_FF_EXP, D)
            experts(b + "ffn_down_exps.weight", D, N_FF_EXP)
            mat(b + "ffn_gate_shexp.weight", N_SHARED * N_FF_EXP, D)
            mat(b + "ffn_up_shexp.weight", N_SHARED * N_FF_EXP, D)
            mat(b + "ffn_down_shexp.weight", D, N_SHARED * N_FF_EXP)
    return r


def main():
    direct = [(t, f"tiny-deepseek2-{t}", cfg, seed)
              for t, cfg, seed in (("f32", PRECISE, 31), ("q8_0", DEFAULTS, 32),
                                   ("q4_k_m", DEFAULTS, 33))]
    qlora = [(t, f"tiny-deepseek2-qlora-{t}", cfg, seed)
             for t, cfg, seed in (("f32", PRECISE, 34), ("q8_0", DEFAULTS, 35))]
    make_arch_goldens(sys.argv[1:], [("tiny-deepseek2", recipe(), direct),
                                     ("tiny-deepseek2-qlora", recipe(q_lora=256), qlora)],
                      PROMPTS, GREEDY)


if __name__ == "__main__":
    main()
