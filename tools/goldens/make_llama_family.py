#!/usr/bin/env python3
"""llama.cpp goldens for the llama family's features (tests: crates/cli/tests/llama_family.rs).

Writes tiny random models with tiny_models.py (beside this file) into OUT_DIR, each feature in
its own file: llama3 RoPE factors (`rope_freqs.weight`), linear RoPE scaling with an attention
factor, YaRN, a Mixtral-style MoE under the llama architecture, llama's optional biases, and
Qwen2/Qwen3 with YaRN. F32 files, and Q8_0 copies from llama.cpp's quantizer for some.

Goldens are made as ../shared/golden/make_goldens.py makes the tiny ones (llama-cpp-python
0.3.36 on the CPU, 2 threads, n_ctx = n_batch = n_ubatch = 1024, one batched pass over the
prompt with every position's logits, then greedy steps one token at a time), all in llama.cpp's
precise configuration (no flash attention, F32 KV cache), the Q8_0 files too: these goldens are
about the features' math, and the F16 cache's own noise (covered by the tiny goldens and
goldens/kv-cache) flips near-tied top-1s of these small models. Two prompts (lengths 7 and 60:
past the YaRN models' original context of 32), 8 greedy steps, logits to 5 significant digits.
Same JSON shape as the tiny goldens.

usage: make_llama_family.py OUT_DIR [STEM...]   (default: every model)
"""
import json
import os
import random
import sys

import llama_cpp as L
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_models import RopeScaling, Shape, quantize, write  # noqa: E402

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


def load(path, precise):
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    assert model, f"llama.cpp refused {path}"
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 1024
    cp.n_threads = cp.n_threads_batch = 2
    if precise:  # flash attention off, F32 KV cache
        cp.flash_attn_type = 0
        cp.type_k = cp.type_v = 0
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "context failed"
    return model, ctx


def decode(ctx, toks, pos0, all_logits, nv):
    b = L.llama_batch_init(len(toks), 0, 1)
    for i, t in enumerate(toks):
        b.token[i] = t; b.pos[i] = pos0 + i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0
        b.logits[i] = 1 if (all_logits or i == len(toks) - 1) else 0
    b.n_tokens = len(toks)
    assert L.llama_decode(ctx, b) == 0, "decode failed"
    idx = range(len(toks)) if all_logits else [len(toks) - 1]
    out = [np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(nv,)).copy() for i in idx]
    L.llama_batch_free(b)
    return out


def greedy(ctx, prompt, nv):
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    pl = decode(ctx, prompt, 0, True, nv)
    steps, toks, last = [], [], pl[-1]
    for s in range(GREEDY):
        t = int(np.argmax(last)); toks.append(t); steps.append(last)
        last = decode(ctx, [t], len(prompt) + s, False, nv)[0]
    return pl, toks, steps


def r5(a):
    return [float("%.5g" % x) for x in a]


def golden(out_dir, stem, seed):
    path = f"{out_dir}/{stem}.gguf"
    model, ctx = load(path, precise=True)
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    rng = random.Random(seed)
    cases = []
    for n in PROMPTS:
        prompt = [rng.randrange(nv) for _ in range(n)]
        pl, toks, steps = greedy(ctx, prompt, nv)
        cases.append(dict(prompt=prompt, prompt_logits=[r5(x) for x in pl], greedy=toks,
                          greedy_logits=[r5(x) for x in steps]))
    ref = "precise: flash attention off, F32 KV cache"
    json.dump(dict(model=f"{stem}.gguf", n_vocab=nv,
                   reference=f"llama.cpp CPU (llama-cpp-python 0.3.36), {ref}",
                   note="prompt_logits[i] are the logits after prompt[0..=i] in one batch; "
                        "greedy_logits[s] are the logits that chose greedy[s]",
                   cases=cases), open(f"{out_dir}/{stem}.json", "w"), separators=(",", ":"))
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(f"{out_dir}/{stem}.json")


def main():
    out_dir, names = sys.argv[1], sys.argv[2:] or list(MODELS)
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        shape = MODELS[name]
        f32 = f"{out_dir}/{name}-f32.gguf"
        write(f32, shape)
        golden(out_dir, f"{name}-f32", shape.seed)
        for ft in QUANTIZED.get(name, []):
            quantize(f32, f"{out_dir}/{name}-{ft}.gguf", ft)
            golden(out_dir, f"{name}-{ft}", shape.seed)


if __name__ == "__main__":
    main()
