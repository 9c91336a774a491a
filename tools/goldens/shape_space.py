#!/usr/bin/env python3
"""Tiny random models across the shapes real GGUF files have, with llama.cpp goldens.

Each row of SPECS is one model: an architecture and the dimensions that vary between real
files (width not a power of two, head sizes 64/80/128, GQA ratios 1-8, RoPE bases 1e4-1e6,
tied or untied output, expert counts and top-k, vocab sizes that are not multiples of 256,
1-3 blocks). For every row this writes a random F32 model (not kept), quantizes it with
llama.cpp's own quantizer (`llama_model_quantize`) to each of TYPES, and makes a golden of
each quantized file the way ../shared/golden/make_goldens.py makes the tiny goldens:
llama-cpp-python 0.3.36 on the CPU, 2 threads, llama.cpp's defaults (flash attention auto,
F16 KV cache), n_ctx = n_batch = n_ubatch = 1024; random prompt ids (PROMPT_LENGTHS: one
short prompt and one past 64 rows, where ggml switches to its tiled attention), all prompt
logits from one batch, then GREEDY argmax steps one token at a time. Same JSON shape as the
tiny goldens (crates/engine/tests/golden_tiny.rs reads both); logits to 5 significant digits,
to keep the files small.

Weights are normal with std 1.28/sqrt(fan_in) (the tiny goldens' 0.08 at width 256), router
3.2/sqrt(d), norms 1 +- 0.1, biases 0.1; seeded by the row's name, so a row regenerates the
same model.

Other variants (rope_freqs, RoPE scaling, llama-architecture MoE, ...) are extra rows: a
field in Spec with a default that writes nothing, and its keys/tensors in model_tensors().

usage: shape_space.py OUT_DIR [NAME...]     (default: every row; run from any directory)
       shape_space.py --list               (rows, parameter counts and the sizes they imply)
writes OUT_DIR/NAME-TYPE.gguf and OUT_DIR/NAME-TYPE.json for TYPE in TYPES.
"""
import dataclasses
import json
import os
import sys
import tempfile
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_write as gw  # noqa: E402

TYPES = {"q8_0": 7, "q4_k_m": 15}  # llama_ftype
PROMPT_LENGTHS = (6, 67)
GREEDY = 10


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    arch: str  # llama, qwen2, qwen3, olmoe, qwen3moe
    d: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int  # dense FFN width; for MoE rows each expert's
    vocab: int
    rope_base: float
    tied: bool = False
    n_expert: int = 0
    n_expert_used: int = 0

    @property
    def is_moe(self):
        return self.n_expert > 0


SPECS = [
    # The failing shape (llama, untied, width 512, RoPE 5e5, head 64), one block.
    Spec("llama-d512-h64-gqa4-r5e5", "llama", 512, 1, 8, 2, 64, 128, 320, 5e5),
    Spec("llama-d320-h64-gqa5-tied", "llama", 320, 2, 5, 1, 64, 192, 301, 1e4, tied=True),
    Spec("llama-d448-h64-gqa1-r1e6", "llama", 448, 1, 7, 7, 64, 128, 301, 1e6),
    Spec("llama-d576-h64-gqa3-tied", "llama", 576, 1, 9, 3, 64, 128, 333, 1e4, tied=True),
    Spec("llama-d256-h128-gqa2-l3", "llama", 256, 3, 2, 1, 128, 128, 403, 5e5),
    Spec("qwen2-d384-h64-gqa3-tied", "qwen2", 384, 1, 6, 2, 64, 192, 317, 1e6, tied=True),
    Spec("qwen2-d256-h128-gqa2", "qwen2", 256, 1, 2, 1, 128, 128, 389, 1e6),
    Spec("qwen3-d320-h80-gqa2-tied", "qwen3", 320, 2, 4, 2, 80, 128, 300, 1e6, tied=True),
    Spec("qwen3-d256-h128-gqa4-v777", "qwen3", 256, 1, 4, 1, 128, 128, 777, 1e6),
    Spec("qwen3-d256-h64-gqa8-r5e5", "qwen3", 256, 2, 8, 1, 64, 128, 421, 5e5),
    Spec("olmoe-d320-h64-e12k5", "olmoe", 320, 1, 5, 5, 64, 64, 300, 1e4,
         n_expert=12, n_expert_used=5),
    Spec("olmoe-d256-h128-e6k2", "olmoe", 256, 1, 2, 2, 128, 96, 350, 5e5,
         n_expert=6, n_expert_used=2),
    Spec("qwen3moe-d256-h128-gqa4-e12k5", "qwen3moe", 256, 1, 4, 1, 128, 64, 331, 1e6,
         n_expert=12, n_expert_used=5),
    Spec("qwen3moe-d320-h64-gqa5-e8k2", "qwen3moe", 320, 1, 5, 1, 64, 64, 350, 1e4,
         n_expert=8, n_expert_used=2),
]


def model_tensors(s, rng):
    """(metadata, [(name, array)]) of spec `s`, random weights from `rng`."""
    u, f, st = gw.U32, gw.F32, gw.STRING
    a = s.arch
    md = {
        "general.architecture": (st, a),
        "general.name": (st, f"shape-space-{s.name}"),
        f"{a}.context_length": (u, 4096),
        f"{a}.embedding_length": (u, s.d),
        f"{a}.block_count": (u, s.n_layer),
        f"{a}.feed_forward_length": (u, s.n_ff),
        f"{a}.attention.head_count": (u, s.n_head),
        f"{a}.attention.head_count_kv": (u, s.n_head_kv),
        f"{a}.attention.key_length": (u, s.head_dim),
        f"{a}.attention.value_length": (u, s.head_dim),
        f"{a}.rope.freq_base": (f, s.rope_base),
        f"{a}.attention.layer_norm_rms_epsilon": (f, 1e-5 if a in ("llama", "olmoe") else 1e-6),
        f"{a}.vocab_size": (u, s.vocab),
    }
    if s.is_moe:
        md[f"{a}.expert_count"] = (u, s.n_expert)
        md[f"{a}.expert_used_count"] = (u, s.n_expert_used)
        if a == "qwen3moe":
            md[f"{a}.expert_feed_forward_length"] = (u, s.n_ff)
    md["tokenizer.ggml.model"] = (st, "no_vocab")
    md["general.file_type"] = (u, 0)

    def w(*shape):  # numpy shape (..., out, in): std 1.28/sqrt(in)
        return rng.normal(0, 1.28 / np.sqrt(shape[-1]), shape).astype(np.float32)

    def norm(n):
        return (1 + rng.normal(0, 0.1, n)).astype(np.float32)

    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    t = [("token_embd.weight", rng.normal(0, 0.08, (s.vocab, s.d)).astype(np.float32))]
    if not s.tied:
        t.append(("output.weight", w(s.vocab, s.d)))
    t.append(("output_norm.weight", norm(s.d)))
    for i in range(s.n_layer):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", norm(s.d)), (b + "attn_q.weight", w(q, s.d)),
              (b + "attn_k.weight", w(kv, s.d)), (b + "attn_v.weight", w(kv, s.d))]
        if a == "qwen2":
            t += [(b + f"attn_{x}.bias", rng.normal(0, 0.1, n).astype(np.float32))
                  for x, n in (("q", q), ("k", kv), ("v", kv))]
        t.append((b + "attn_output.weight", w(s.d, q)))
        if a in ("qwen3", "qwen3moe"):
            t += [(b + "attn_q_norm.weight", norm(s.head_dim)),
                  (b + "attn_k_norm.weight", norm(s.head_dim))]
        if a == "olmoe":
            t += [(b + "attn_q_norm.weight", norm(q)), (b + "attn_k_norm.weight", norm(kv))]
        t.append((b + "ffn_norm.weight", norm(s.d)))
        if s.is_moe:
            e = s.n_expert
            t += [(b + "ffn_gate_inp.weight",
                   rng.normal(0, 3.2 / np.sqrt(s.d), (e, s.d)).astype(np.float32)),
                  (b + "ffn_gate_exps.weight", w(e, s.n_ff, s.d)),
                  (b + "ffn_up_exps.weight", w(e, s.n_ff, s.d)),
                  (b + "ffn_down_exps.weight", w(e, s.d, s.n_ff))]
        else:
            t += [(b + "ffn_gate.weight", w(s.n_ff, s.d)), (b + "ffn_up.weight", w(s.n_ff, s.d)),
                  (b + "ffn_down.weight", w(s.d, s.n_ff))]
    return md, t


def n_params(s):
    return sum(a.size for _, a in model_tensors(s, _ShapeRng())[1])


class _ShapeRng:
    """Stands in for a Generator where only shapes are wanted (--list)."""

    def normal(self, _mean, _std, shape):
        return np.zeros(shape, dtype=np.float32)


# ---- llama.cpp (imported late: --list needs no llama.cpp) ----

def llama():
    import llama_cpp
    if not hasattr(llama, "quiet"):
        llama.quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(llama.quiet, None)  # its load logs would bury the summary
    return llama_cpp


def quantize(src, dst, ftype):
    import ctypes
    L = llama()
    p = L.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    assert L.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0, dst


def load(path, n_ctx=1024):
    L = llama()
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    assert model, f"llama.cpp could not load {path}"
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx; cp.n_threads = 2; cp.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "context failed"
    return model, ctx


def decode(ctx, toks, pos0, all_logits, nv):
    L = llama()
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


def r5(a):
    return [float("%.5g" % x) for x in a]


def golden(path, out, seed):
    L = llama()
    model, ctx = load(path)
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    rng = np.random.default_rng(seed)
    cases = []
    for n in PROMPT_LENGTHS:
        prompt = [int(x) for x in rng.integers(0, nv, n)]
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        pl = decode(ctx, prompt, 0, True, nv)
        steps, toks, last = [], [], pl[-1]
        for s in range(GREEDY):
            tok = int(np.argmax(last)); toks.append(tok); steps.append(last)
            last = decode(ctx, [tok], n + s, False, nv)[0]
        cases.append(dict(prompt=prompt, prompt_logits=[r5(x) for x in pl], greedy=toks,
                          greedy_logits=[r5(x) for x in steps]))
    L.llama_free(ctx)
    L.llama_model_free(model)
    json.dump(dict(model=os.path.basename(path), n_vocab=nv,
                   reference="llama.cpp CPU (llama-cpp-python 0.3.36), defaults: flash attention "
                             "auto, F16 KV cache",
                   note="prompt_logits[i] are the logits after prompt[0..=i] in one batch; "
                        "greedy_logits[s] are the logits that chose greedy[s]",
                   cases=cases), open(out, "w"))


def make(s, out_dir):
    seed = zlib.crc32(s.name.encode())
    md, tensors = model_tensors(s, np.random.default_rng(seed))
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, f"{s.name}-f32.gguf")
        gw.write(f32, md, tensors)
        for ty, ftype in TYPES.items():
            stem = os.path.join(out_dir, f"{s.name}-{ty}")
            quantize(f32, stem + ".gguf", ftype)
            golden(stem + ".gguf", stem + ".json", seed)
            print(f"{stem}: {os.path.getsize(stem + '.gguf') / 1e6:.2f} MB model, "
                  f"{os.path.getsize(stem + '.json') / 1e6:.2f} MB golden", flush=True)


def main():
    args = sys.argv[1:]
    if args == ["--list"]:
        total = 0
        for s in SPECS:
            n = n_params(s)
            total += n
            print(f"{s.name:34s} {n / 1e6:5.2f} M params")
        rows = sum(n + GREEDY - 1 for n in PROMPT_LENGTHS)
        js = sum(rows * s.vocab * 8.5 for s in SPECS) * len(TYPES)
        print(f"{len(SPECS)} rows, {total / 1e6:.1f} M params: about {total * 1.66 / 1e6:.0f} MB "
              f"of Q8_0 + Q4_K_M files and {js / 1e6:.0f} MB of goldens")
        return
    out_dir, names = args[0], args[1:]
    os.makedirs(out_dir, exist_ok=True)
    unknown = set(names) - {s.name for s in SPECS}
    assert not unknown, f"no such rows: {sorted(unknown)}"
    for s in SPECS:
        if not names or s.name in names:
            make(s, out_dir)


if __name__ == "__main__":
    main()
