#!/usr/bin/env python3
"""llama.cpp goldens for the llama family's features (tests: crates/cli/tests/llama_family.rs).

Writes the recipes of tiny random models (tiny_models.py, beside this file) into OUT_DIR, each
feature in its own model: llama3 RoPE factors (`rope_freqs.weight`), linear RoPE scaling with an
attention factor, YaRN, a Mixtral-style MoE under the llama architecture, llama's optional
biases, and Qwen2/Qwen3 with YaRN. Goldens of the F32 files (`ferrolm synth --recipe`), and of
Q8_0 copies from llama.cpp's quantizer for some (golden_lib.py; each golden holds the sha256 of
the model file llama.cpp ran).

All goldens are made in llama.cpp's precise configuration (no flash attention, F32 KV cache),
the Q8_0 files too: these goldens are about the features' math, and the F16 cache's own noise
(covered by the tiny goldens and goldens/kv-cache) flips near-tied top-1s of these small
models. Two prompts (lengths 7 and 60: past the YaRN models' original context of 32), 8 greedy
steps, logits to 5 significant digits.

usage: make_llama_family.py [--ferrolm BIN] OUT_DIR [STEM...]   (default: every model, and
       target/debug/ferrolm; run with /work/venv-llama/bin/python)
writes OUT_DIR/STEM.recipe.json and OUT_DIR/STEM-TYPE.json.gz
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import DEFAULT_FERROLM, PRECISE, make_golden, random_prompts  # noqa: E402
from tiny_models import RopeScaling, Shape, recipe  # noqa: E402

YARN = RopeScaling("yarn", 4.0, original_context_length=32)
MODELS = {
    # llama3 factors with a short original context, so most pairs get a divisor above 1.
    "llama-rope-freqs": Shape(rope_base=500000.0, llama3_rope=(8.0, 1.0, 4.0, 64), seed=1),
    "llama-linear": Shape(scaling=RopeScaling("linear", 4.0, attn_factor=0.8), seed=2),
    "llama-yarn": Shape(scaling=YARN, seed=3),
    "llama-moe": Shape(n_expert=4, n_expert_used=2, n_ff=128, tied=True, seed=4),
    "llama-bias": Shape(attn_bias=True, ffn_bias=True, seed=5),
    "qwen2-yarn": Shape(arch="qwen2", scaling=YARN, rope_base=1e6, seed=6),
    "qwen3-yarn": Shape(arch="qwen3", head_dim=64, scaling=YARN, rope_base=1e6, seed=7),
}
QUANTIZED = {"llama-rope-freqs": ["q8_0"], "llama-yarn": ["q8_0"], "llama-moe": ["q8_0"]}
PROMPTS = (7, 60)
GREEDY = 8


def main():
    args = sys.argv[1:]
    ferrolm = DEFAULT_FERROLM
    if args[:1] == ["--ferrolm"]:
        ferrolm, args = args[1], args[2:]
    out_dir, names = args[0], args[1:] or list(MODELS)
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        shape = MODELS[name]
        path = os.path.join(out_dir, f"{name}.recipe.json")
        recipe(shape, f"llama-family model {name} (tools/goldens/make_llama_family.py)").save(path)
        for ft in ["f32", *QUANTIZED.get(name, [])]:
            out = make_golden(ferrolm, path, ft, out_dir, f"{name}-{ft}", PRECISE,
                              lambda nv: random_prompts(shape.seed, PROMPTS, nv), GREEDY)
            print(out, flush=True)


if __name__ == "__main__":
    main()
