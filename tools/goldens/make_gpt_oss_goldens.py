#!/usr/bin/env python3
"""Tiny random gpt-oss models and their llama.cpp goldens (tests: crates/cli/tests/gpt_oss.rs).

The model has what a released gpt-oss GGUF has, small: 2 blocks (block 0 attends over a
sliding window of 16, block 1 over everything, llama.cpp's pattern for gpt-oss), d 256, 8 query
heads of 64 over 2 KV heads (q is wider than d, as in gpt-oss-20b), biased q/k/v/output
projections, nonzero attention sinks, YaRN RoPE (factor 32 over an original 4096, base 150000),
8 experts with top-4, a biased router, biased experts in MXFP4 (stored so by the recipe, as
convert_hf_to_gguf.py keeps the checkpoint's MXFP4) and the rest F32, vocab 512, no_vocab.

The recipe (`tiny-gpt-oss.recipe.json`, golden_lib.py) is made into two models:

- `tiny-gpt-oss-mxfp4-f32`: `ferrolm synth --recipe --type f32`, the file as declared (experts
  MXFP4, the rest F32), golden in llama.cpp's precise configuration (flash attention off, F32
  KV cache).
- `tiny-gpt-oss-mxfp4-q8_0`: llama.cpp's quantizer with `MXFP4_MOE` (what the released files
  are: experts MXFP4, other matrices Q8_0), golden with llama.cpp's defaults (flash attention on
  the CPU, F16 KV cache).

Goldens as golden_lib.py makes them; prompts of 7, 33 and 100 random ids (the longer ones past
the window), 16 greedy steps; logits to 6 significant digits (the F32 golden backs a p95 bar
of 1e-4). Each golden holds the sha256 of the model file llama.cpp ran.

usage: make_gpt_oss_goldens.py [--ferrolm BIN] OUT_DIR   (run with /work/venv-llama/bin/python)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import DEFAULTS, PRECISE, Recipe, make_arch_goldens  # noqa: E402

ARCH = "gpt-oss"
D, N_LAYER, N_HEAD, N_HEAD_KV, HEAD = 256, 2, 8, 2, 64
N_EXPERT, N_USED, N_FF = 8, 4, 256
N_VOCAB, WINDOW = 512, 16
PROMPTS, GREEDY = (7, 33, 100), 16


def recipe(seed=0):
    r = Recipe(seed, "tiny gpt-oss (tools/goldens/make_gpt_oss_goldens.py)")
    r.kv("general.architecture", "string", ARCH)
    r.kv("general.name", "string", "tiny-gpt-oss-synthetic")
    for key, ty, v in (("context_length", "u32", 131072), ("embedding_length", "u32", D),
                       ("block_count", "u32", N_LAYER), ("feed_forward_length", "u32", N_FF),
                       ("attention.head_count", "u32", N_HEAD),
                       ("attention.head_count_kv", "u32", N_HEAD_KV),
                       ("attention.key_length", "u32", HEAD),
                       ("attention.value_length", "u32", HEAD),
                       ("rope.dimension_count", "u32", HEAD), ("rope.freq_base", "f32", 150000.0),
                       ("attention.layer_norm_rms_epsilon", "f32", 1e-5),
                       ("expert_count", "u32", N_EXPERT), ("expert_used_count", "u32", N_USED),
                       ("expert_feed_forward_length", "u32", N_FF),
                       ("attention.sliding_window", "u32", WINDOW),
                       ("rope.scaling.type", "string", "yarn"), ("rope.scaling.factor", "f32", 32.0),
                       ("rope.scaling.original_context_length", "u32", 4096),
                       ("vocab_size", "u32", N_VOCAB)):
        r.kv(f"{ARCH}.{key}", ty, v)
    r.kv("tokenizer.ggml.model", "string", "no_vocab")
    r.kv("general.file_type", "u32", 0)

    def mat(name, rows, cols, *stack, scale=1.0, ty=None):  # ggml dims [cols, rows, *stack]
        r.normal(name, (cols, rows, *stack), 0, scale / math.sqrt(cols), ty)

    def norm(name, n):
        r.normal(name, (n,), 1, 0.1)

    def bias(name, *dims):
        r.normal(name, dims, 0, 0.1)

    q_w, kv_w = N_HEAD * HEAD, N_HEAD_KV * HEAD
    r.normal("token_embd.weight", (D, N_VOCAB), 0, 1)
    mat("output.weight", N_VOCAB, D)
    norm("output_norm.weight", D)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", D)
        for name, width in (("attn_q", q_w), ("attn_k", kv_w), ("attn_v", kv_w)):
            mat(b + name + ".weight", width, D)
            bias(b + name + ".bias", width)
        mat(b + "attn_output.weight", D, q_w)
        bias(b + "attn_output.bias", D)
        # Sinks of the size real ones have, some above the typical score, some below.
        r.normal(b + "attn_sinks.weight", (N_HEAD,), 1, 1)
        norm(b + "post_attention_norm.weight", D)
        mat(b + "ffn_gate_inp.weight", N_EXPERT, D)
        bias(b + "ffn_gate_inp.bias", N_EXPERT)
        # gate/up scaled up so that swiglu_oai's clamps at +-7 are reached now and then; the
        # experts stored as MXFP4, as convert_hf_to_gguf.py keeps the checkpoint's.
        for name, rows, cols, scale in (("gate", N_FF, D, 3.0), ("up", N_FF, D, 3.0),
                                        ("down", D, N_FF, 1.0)):
            mat(b + f"ffn_{name}_exps.weight", rows, cols, N_EXPERT, scale=scale, ty="mxfp4")
            bias(b + f"ffn_{name}_exps.bias", rows, N_EXPERT)
    return r


def main():
    cases = [("f32", "tiny-gpt-oss-mxfp4-f32", PRECISE, 11),
             ("mxfp4_moe", "tiny-gpt-oss-mxfp4-q8_0", DEFAULTS, 12)]
    make_arch_goldens(sys.argv[1:], [("tiny-gpt-oss", recipe(), cases)], PROMPTS, GREEDY)


if __name__ == "__main__":
    main()
