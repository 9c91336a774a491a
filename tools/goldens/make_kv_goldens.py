#!/usr/bin/env python3
"""llama.cpp goldens with a quantized KV cache, for `-ctk`/`-ctv` parity (tests: crates/cli/tests/kv_cache.rs).

Made the way ../shared/golden/make_goldens.py makes the tiny goldens (llama-cpp-python 0.3.36
on the CPU, 2 threads, n_ctx = n_batch = n_ubatch = 1024, one batched forward pass over the
prompt with every position's logits, then greedy steps one token at a time), with
type_k = type_v = the cache type and flash attention on (llama.cpp requires it for a quantized
V cache). The prompts are the first cases of the model's golden beside it (lengths 7 and 33);
8 greedy steps; logits to 5 significant digits, to keep the files small. Same JSON shape.

usage: make_kv_goldens.py GOLDEN_DIR OUT_DIR CACHE_TYPE STEM [STEM...]
  e.g. make_kv_goldens.py ../shared/golden goldens/kv-cache q8_0 tiny-llama-q8_0 tiny-qwen3-q4_k_m
writes OUT_DIR/STEM-kv{CACHE_TYPE}.json
"""
import json
import sys

import llama_cpp as L
import numpy as np

GGML_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}
CASES = 2
GREEDY = 8


def load(path, cache_type, n_ctx=1024):
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    assert model, "load failed"
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx; cp.n_threads = 2; cp.n_threads_batch = 2
    cp.flash_attn_type = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED
    cp.type_k = cp.type_v = GGML_TYPES[cache_type]
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "ctx failed"
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


def greedy(ctx, prompt, n, nv):
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    pl = decode(ctx, prompt, 0, True, nv)
    steps, toks, last = [], [], pl[-1]
    for s in range(n):
        t = int(np.argmax(last)); toks.append(t); steps.append(last)
        last = decode(ctx, [t], len(prompt) + s, False, nv)[0]
    return pl, toks, steps


def r5(a):
    return [float("%.5g" % x) for x in a]


def make(gdir, out_dir, cache_type, stem):
    model, ctx = load(f"{gdir}/{stem}.gguf", cache_type)
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    prompts = [c["prompt"] for c in json.load(open(f"{gdir}/{stem}.json"))["cases"][:CASES]]
    cases = []
    for prompt in prompts:
        pl, toks, steps = greedy(ctx, prompt, GREEDY, nv)
        cases.append(dict(prompt=prompt, prompt_logits=[r5(x) for x in pl], greedy=toks,
                          greedy_logits=[r5(x) for x in steps]))
    out = f"{out_dir}/{stem}-kv{cache_type}.json"
    json.dump(dict(model=f"{stem}.gguf", n_vocab=nv,
                   reference=f"llama.cpp CPU (llama-cpp-python 0.3.36), flash attention on, "
                             f"KV cache type_k = type_v = {cache_type}",
                   note="prompt_logits[i] are the logits after prompt[0..=i] in one batch; "
                        "greedy_logits[s] are the logits that chose greedy[s]",
                   cases=cases), open(out, "w"), separators=(",", ":"))
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(out)


if __name__ == "__main__":
    gdir, out_dir, cache_type, stems = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    for stem in stems:
        make(gdir, out_dir, cache_type, stem)
