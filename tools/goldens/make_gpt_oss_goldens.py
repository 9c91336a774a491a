#!/usr/bin/env python3
"""Tiny random gpt-oss models and their llama.cpp goldens (tests: crates/cli/tests/gpt_oss.rs).

The model has what a released gpt-oss GGUF has, small: 2 blocks (block 0 attends over a
sliding window of 16, block 1 over everything, llama.cpp's pattern for gpt-oss), d 256, 8 query
heads of 64 over 2 KV heads (q is wider than d, as in gpt-oss-20b), biased q/k/v/output
projections, nonzero attention sinks, YaRN RoPE (factor 32 over an original 4096, base 150000),
8 experts with top-4, a biased router, biased experts in MXFP4 (quantized by gguf-py, as
convert_hf_to_gguf.py keeps the checkpoint's MXFP4) and the rest F32, vocab 512, no_vocab.

- `tiny-gpt-oss-mxfp4-f32.gguf`: as written, golden in llama.cpp's precise configuration
  (flash attention off, F32 KV cache).
- `tiny-gpt-oss-mxfp4-q8_0.gguf`: llama.cpp's quantizer with `MXFP4_MOE` (what the released
  files are: experts MXFP4, other matrices Q8_0), golden with llama.cpp's defaults (flash
  attention on the CPU, F16 KV cache).

Goldens as ../shared/golden/make_goldens.py makes the tiny ones: llama-cpp-python 0.3.36 on the
CPU, 2 threads, n_ctx = n_batch = n_ubatch = 1024; prompts of 7, 33 and 100 random ids (the
longer ones past the window), one batched pass with every position's logits, then 16 greedy
steps one token at a time; logits to 6 significant digits. Same JSON shape as the tiny goldens.

usage: make_gpt_oss_goldens.py OUT_DIR
"""
import ctypes
import json
import math
import os
import random
import sys

import gguf
import llama_cpp as L
import numpy as np

MXFP4_MOE = 38  # llama_ftype LLAMA_FTYPE_MOSTLY_MXFP4_MOE
ARCH = "gpt-oss"
D, N_LAYER, N_HEAD, N_HEAD_KV, HEAD = 256, 2, 8, 2, 64
N_EXPERT, N_USED, N_FF = 8, 4, 256
N_VOCAB, WINDOW = 512, 16


def write(path, seed=0):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name("tiny-gpt-oss-synthetic")
    w.add_context_length(131072)
    w.add_embedding_length(D)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD)
    w.add_value_length(HEAD)
    w.add_rope_dimension_count(HEAD)
    w.add_rope_freq_base(150000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_USED)
    w.add_expert_feed_forward_length(N_FF)
    w.add_sliding_window(WINDOW)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("no_vocab")
    w.add_file_type(0)

    def mat(rows, cols, *stack):  # ggml dims [cols, rows, *stack]; numpy's shape is reversed
        return (rng.standard_normal((*stack[::-1], rows, cols)) / math.sqrt(cols)).astype(np.float32)

    def mxfp4(a):
        return gguf.quants.quantize(a, gguf.GGMLQuantizationType.MXFP4)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(*shape):
        return (0.1 * rng.standard_normal(shape[::-1])).astype(np.float32)

    q_w, kv_w = N_HEAD * HEAD, N_HEAD_KV * HEAD
    w.add_tensor("token_embd.weight", rng.standard_normal((N_VOCAB, D)).astype(np.float32))
    w.add_tensor("output.weight", mat(N_VOCAB, D))
    w.add_tensor("output_norm.weight", norm(D))
    for i in range(N_LAYER):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(D))
        for name, width in (("attn_q", q_w), ("attn_k", kv_w), ("attn_v", kv_w)):
            w.add_tensor(b + name + ".weight", mat(width, D))
            w.add_tensor(b + name + ".bias", bias(width))
        w.add_tensor(b + "attn_output.weight", mat(D, q_w))
        w.add_tensor(b + "attn_output.bias", bias(D))
        # Sinks of the size real ones have, some above the typical score, some below.
        w.add_tensor(b + "attn_sinks.weight", (1.0 + rng.standard_normal(N_HEAD)).astype(np.float32))
        w.add_tensor(b + "post_attention_norm.weight", norm(D))
        w.add_tensor(b + "ffn_gate_inp.weight", mat(N_EXPERT, D))
        w.add_tensor(b + "ffn_gate_inp.bias", bias(N_EXPERT))
        # gate/up scaled up so that swiglu_oai's clamps at ±7 are reached now and then.
        for name, rows, cols, scale in (("gate", N_FF, D, 3.0), ("up", N_FF, D, 3.0), ("down", D, N_FF, 1.0)):
            q = mxfp4(mat(rows, cols, N_EXPERT) * scale)
            w.add_tensor(b + f"ffn_{name}_exps.weight", q, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
            w.add_tensor(b + f"ffn_{name}_exps.bias", bias(rows, N_EXPERT))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src, dst, ftype):
    p = L.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    rc = L.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    assert rc == 0, f"quantize {src}: {rc}"


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
        b.token[i] = t
        b.pos[i] = pos0 + i
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = 0
        b.logits[i] = 1 if (all_logits or i == len(toks) - 1) else 0
    b.n_tokens = len(toks)
    assert L.llama_decode(ctx, b) == 0
    idx = range(len(toks)) if all_logits else [len(toks) - 1]
    out = [np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(nv,)).copy() for i in idx]
    L.llama_batch_free(b)
    return out


def r6(a):
    return [float("%.6g" % x) for x in a]


def golden(path, out, precise, seed):
    model, ctx = load(path, precise)
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    rng = random.Random(seed)
    cases = []
    for n in (7, 33, 100):
        prompt = [rng.randrange(nv) for _ in range(n)]
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        pl = decode(ctx, prompt, 0, True, nv)
        toks, steps, last = [], [], pl[-1]
        for s in range(16):
            t = int(np.argmax(last))
            toks.append(t)
            steps.append(last)
            last = decode(ctx, [t], n + s, False, nv)[0]
        cases.append(dict(prompt=prompt, prompt_logits=[r6(x) for x in pl], greedy=toks,
                          greedy_logits=[r6(x) for x in steps]))
    reference = "llama.cpp CPU (llama-cpp-python 0.3.36), " + (
        "precise: flash attention off, F32 KV cache" if precise
        else "defaults: flash attention auto, F16 KV cache")
    json.dump(dict(model=os.path.basename(path), n_vocab=nv, reference=reference,
                   note="prompt_logits[i] are the logits after prompt[0..=i] in one batch; "
                        "greedy_logits[s] are the logits that chose greedy[s]",
                   cases=cases), open(out, "w"))
    L.llama_free(ctx)
    L.llama_model_free(model)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    f32 = os.path.join(out_dir, "tiny-gpt-oss-mxfp4-f32.gguf")
    q8 = os.path.join(out_dir, "tiny-gpt-oss-mxfp4-q8_0.gguf")
    write(f32)
    quantize(f32, q8, MXFP4_MOE)
    golden(f32, f32.replace(".gguf", ".json"), True, 11)
    golden(q8, q8.replace(".gguf", ".json"), False, 12)


if __name__ == "__main__":
    main()
