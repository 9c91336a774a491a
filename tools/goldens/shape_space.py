#!/usr/bin/env python3
"""Tiny random models across the shapes real GGUF files have, with llama.cpp goldens.

Each row of SPECS is one model: an architecture and the dimensions that vary between real
files (width not a power of two, head sizes 64/80/128, GQA ratios 1-8, RoPE bases 1e4-1e6,
tied or untied output, expert counts and top-k, vocab sizes that are not multiples of 256,
1-3 blocks). For every row this writes the row's recipe (OUT_DIR/NAME.recipe.json, see
golden_lib.py), makes its F32 model with `ferrolm synth --recipe` (not kept), quantizes it with
llama.cpp's own quantizer (`llama_model_quantize`) to each of TYPES, and makes a golden of
each quantized file (golden_lib.py: llama-cpp-python 0.3.36 on the CPU, llama.cpp's defaults:
flash attention auto, F16 KV cache); random prompt ids (PROMPT_LENGTHS: one short prompt and
one past 64 rows, where ggml switches to its tiled attention), then GREEDY argmax steps;
logits to 5 significant digits. Each golden holds the sha256 of llama.cpp's quantized file;
crates/engine/tests/golden_shape_space.rs regenerates the file with ferrolm and checks it.

Weights are normal with std 1.28/sqrt(fan_in) (the tiny goldens' 0.08 at width 256), router
3.2/sqrt(d), norms 1 +- 0.1, biases 0.1; seeded by the row's name.

Other variants (rope_freqs, RoPE scaling, llama-architecture MoE, ...) are extra rows: a
field in Spec with a default that writes nothing, and its keys/tensors in recipe().

usage: shape_space.py [--ferrolm BIN] OUT_DIR [NAME...]   (default: every row, and
                      target/debug/ferrolm; run with /work/venv-llama/bin/python)
       shape_space.py --list                              (rows and parameter counts)
writes OUT_DIR/NAME.recipe.json and OUT_DIR/NAME-TYPE.json.gz for TYPE in TYPES.
"""
import dataclasses
import math
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import DEFAULT_FERROLM, DEFAULTS, Recipe, make_golden, random_prompts  # noqa: E402

TYPES = ("q8_0", "q4_k_m")
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


def recipe(s):
    """The recipe of spec `s`: metadata as llama.cpp's converter writes it, tensors in its
    order, seeded by the row's name."""
    a = s.arch
    r = Recipe(zlib.crc32(s.name.encode()), f"shape-space row {s.name} (tools/goldens/shape_space.py)")
    r.kv("general.architecture", "string", a)
    r.kv("general.name", "string", f"shape-space-{s.name}")
    for key, ty, v in (("context_length", "u32", 4096), ("embedding_length", "u32", s.d),
                       ("block_count", "u32", s.n_layer), ("feed_forward_length", "u32", s.n_ff),
                       ("attention.head_count", "u32", s.n_head),
                       ("attention.head_count_kv", "u32", s.n_head_kv),
                       ("attention.key_length", "u32", s.head_dim),
                       ("attention.value_length", "u32", s.head_dim),
                       ("rope.freq_base", "f32", s.rope_base),
                       ("attention.layer_norm_rms_epsilon", "f32",
                        1e-5 if a in ("llama", "olmoe") else 1e-6),
                       ("vocab_size", "u32", s.vocab)):
        r.kv(f"{a}.{key}", ty, v)
    if s.is_moe:
        r.kv(f"{a}.expert_count", "u32", s.n_expert)
        r.kv(f"{a}.expert_used_count", "u32", s.n_expert_used)
        if a == "qwen3moe":
            r.kv(f"{a}.expert_feed_forward_length", "u32", s.n_ff)
    r.kv("tokenizer.ggml.model", "string", "no_vocab")
    r.kv("general.file_type", "u32", 0)

    def w(name, n_out, n_in, *stack):  # std 1.28/sqrt(fan_in)
        r.normal(name, (n_in, n_out, *stack), 0, 1.28 / math.sqrt(n_in))

    def norm(name, n):
        r.normal(name, (n,), 1, 0.1)

    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    r.normal("token_embd.weight", (s.d, s.vocab), 0, 0.08)
    if not s.tied:
        w("output.weight", s.vocab, s.d)
    norm("output_norm.weight", s.d)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", s.d)
        w(b + "attn_q.weight", q, s.d)
        w(b + "attn_k.weight", kv, s.d)
        w(b + "attn_v.weight", kv, s.d)
        if a == "qwen2":
            for x, n in (("q", q), ("k", kv), ("v", kv)):
                r.normal(b + f"attn_{x}.bias", (n,), 0, 0.1)
        w(b + "attn_output.weight", s.d, q)
        if a in ("qwen3", "qwen3moe"):
            norm(b + "attn_q_norm.weight", s.head_dim)
            norm(b + "attn_k_norm.weight", s.head_dim)
        if a == "olmoe":
            norm(b + "attn_q_norm.weight", q)
            norm(b + "attn_k_norm.weight", kv)
        norm(b + "ffn_norm.weight", s.d)
        if s.is_moe:
            e = s.n_expert
            r.normal(b + "ffn_gate_inp.weight", (s.d, e), 0, 3.2 / math.sqrt(s.d))
            w(b + "ffn_gate_exps.weight", s.n_ff, s.d, e)
            w(b + "ffn_up_exps.weight", s.n_ff, s.d, e)
            w(b + "ffn_down_exps.weight", s.d, s.n_ff, e)
        else:
            w(b + "ffn_gate.weight", s.n_ff, s.d)
            w(b + "ffn_up.weight", s.n_ff, s.d)
            w(b + "ffn_down.weight", s.d, s.n_ff)
    return r


def make(s, out_dir, ferrolm):
    """Writes the row's recipe and a golden per type."""
    r = recipe(s)
    path = os.path.join(out_dir, f"{s.name}.recipe.json")
    r.save(path)
    for ty in TYPES:
        t0 = time.time()
        out = make_golden(ferrolm, path, ty, out_dir, f"{s.name}-{ty}", DEFAULTS,
                          lambda nv: random_prompts(r.seed, PROMPT_LENGTHS, nv), GREEDY)
        print(f"{out}: {os.path.getsize(out) / 1e6:.2f} MB, {time.time() - t0:.1f} s", flush=True)


def main():
    args = sys.argv[1:]
    ferrolm = DEFAULT_FERROLM
    if args[:1] == ["--ferrolm"]:
        ferrolm, args = args[1], args[2:]
    if args == ["--list"]:
        total = 0
        for s in SPECS:
            n = recipe(s).n_params()
            total += n
            print(f"{s.name:34s} {n / 1e6:5.2f} M params")
        print(f"{len(SPECS)} rows, {total / 1e6:.1f} M params")
        return
    out_dir, names = args[0], args[1:]
    os.makedirs(out_dir, exist_ok=True)
    unknown = set(names) - {s.name for s in SPECS}
    assert not unknown, f"no such rows: {sorted(unknown)}"
    for s in SPECS:
        if not names or s.name in names:
            make(s, out_dir, ferrolm)


if __name__ == "__main__":
    main()
