#!/usr/bin/env python3
"""Tiny random gemma3 models and their llama.cpp goldens (tests: crates/cli/tests/gemma3.rs).

The model has what a released Gemma 3 GGUF's text model has, small: 7 blocks (llama.cpp fixes
gemma3's pattern at every 6th block global, so blocks 0-4 and 6 attend over a sliding window of
16 and block 5 over everything), d 256, 4 query heads of 128 over 2 KV heads, per-head q/k RMS
norms, RMS norms after attention and after the FFN, a GELU-gated FFN of 512, RoPE base 1e6 with
linear scaling x8 on the global block (the sliding blocks rotate with llama.cpp's base 10000,
unscaled), a tied output, vocab 512, no_vocab. Norm gains are drawn around 1, as the converter
writes Gemma's (it adds the 1 that Gemma's RMS norm adds at run time). The token embeddings
are drawn small (std 1/16) because gemma3 scales them by sqrt(256) = 16.

The recipe (`tiny-gemma3.recipe.json`, golden_lib.py) is made into three models:

- `tiny-gemma3-f32`: the file as declared, golden in llama.cpp's precise configuration (flash
  attention off, F32 KV cache);
- `tiny-gemma3-q8_0`, `tiny-gemma3-q4_k_m`: llama.cpp's quantizer, goldens with llama.cpp's
  defaults (flash attention on the CPU, F16 KV cache).

Goldens as golden_lib.py makes them; prompts of 7, 33 and 100 random ids (the longer ones past
the window), 16 greedy steps; logits to 6 significant digits. Each golden holds the sha256 of
the model file llama.cpp ran.

usage: make_gemma3_goldens.py [--ferrolm BIN] OUT_DIR   (run with /work/venv-llama/bin/python)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import DEFAULTS, PRECISE, Recipe, make_arch_goldens  # noqa: E402

ARCH = "gemma3"
D, N_LAYER, N_HEAD, N_HEAD_KV, HEAD, N_FF = 256, 7, 4, 2, 128, 512
N_VOCAB, WINDOW = 512, 16
PROMPTS, GREEDY = (7, 33, 100), 16


def recipe(seed=0):
    r = Recipe(seed, "tiny gemma3 (tools/goldens/make_gemma3_goldens.py)")
    r.kv("general.architecture", "string", ARCH)
    r.kv("general.name", "string", "tiny-gemma3-synthetic")
    for key, ty, v in (("context_length", "u32", 131072), ("embedding_length", "u32", D),
                       ("block_count", "u32", N_LAYER), ("feed_forward_length", "u32", N_FF),
                       ("attention.head_count", "u32", N_HEAD),
                       ("attention.head_count_kv", "u32", N_HEAD_KV),
                       ("attention.key_length", "u32", HEAD),
                       ("attention.value_length", "u32", HEAD),
                       ("rope.freq_base", "f32", 1e6),
                       ("attention.layer_norm_rms_epsilon", "f32", 1e-6),
                       ("attention.sliding_window", "u32", WINDOW),
                       ("rope.scaling.type", "string", "linear"),
                       ("rope.scaling.factor", "f32", 8.0),
                       ("vocab_size", "u32", N_VOCAB)):
        r.kv(f"{ARCH}.{key}", ty, v)
    r.kv("tokenizer.ggml.model", "string", "no_vocab")
    r.kv("general.file_type", "u32", 0)

    def mat(name, rows, cols):  # ggml dims [cols, rows]
        r.normal(name, (cols, rows), 0, 1 / math.sqrt(cols))

    def norm(name, n):
        r.normal(name, (n,), 1, 0.1)

    q_w, kv_w = N_HEAD * HEAD, N_HEAD_KV * HEAD
    r.normal("token_embd.weight", (D, N_VOCAB), 0, 1 / math.sqrt(D))
    norm("output_norm.weight", D)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", D)
        mat(b + "attn_q.weight", q_w, D)
        mat(b + "attn_k.weight", kv_w, D)
        mat(b + "attn_v.weight", kv_w, D)
        mat(b + "attn_output.weight", D, q_w)
        norm(b + "attn_q_norm.weight", HEAD)
        norm(b + "attn_k_norm.weight", HEAD)
        norm(b + "post_attention_norm.weight", D)
        norm(b + "ffn_norm.weight", D)
        mat(b + "ffn_gate.weight", N_FF, D)
        mat(b + "ffn_up.weight", N_FF, D)
        mat(b + "ffn_down.weight", D, N_FF)
        norm(b + "post_ffw_norm.weight", D)
    return r


def main():
    cases = [(t, f"tiny-gemma3-{t}", cfg, seed)
             for t, cfg, seed in (("f32", PRECISE, 21), ("q8_0", DEFAULTS, 22),
                                  ("q4_k_m", DEFAULTS, 23))]
    make_arch_goldens(sys.argv[1:], [("tiny-gemma3", recipe(), cases)], PROMPTS, GREEDY)


if __name__ == "__main__":
    main()
