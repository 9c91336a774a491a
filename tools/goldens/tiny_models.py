"""Recipes of tiny random llama-family models, laid out as llama.cpp's converter writes them.

A library for golden generators (tools/goldens/make_llama_family.py): `Shape` says what to
vary and `recipe(shape)` is its recipe (golden_lib.Recipe), which `ferrolm synth --recipe`
turns into the F32 file. Matrices are normal with std 1/sqrt(fan_in), norms 1 +- 0.1, biases
0.1; llama3's RoPE factors are computed as convert_hf_to_gguf.py does.
"""
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import Recipe  # noqa: E402


@dataclass
class RopeScaling:
    """`{arch}.rope.scaling.*`: kind is "linear" or "yarn"."""
    kind: str
    factor: float
    original_context_length: Optional[int] = None
    attn_factor: Optional[float] = None


@dataclass
class Shape:
    arch: str = "llama"
    n_embd: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: Optional[int] = None  # None: n_embd / n_head, not written
    n_ff: int = 256
    n_vocab: int = 512
    n_ctx: int = 4096
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    tied: bool = False
    # llama3 frequency factors: None, or (factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings) as in a Llama 3.1 config's rope_scaling.
    llama3_rope: Optional[tuple] = None
    scaling: Optional[RopeScaling] = None
    # Mixture of experts (llama: Mixtral layout; qwen3moe: n_ff_exp wide experts).
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: Optional[int] = None
    # Optional projection biases llama.cpp's llama loader takes: q/k/v/o and the FFN's.
    attn_bias: bool = False
    ffn_bias: bool = False
    seed: int = 0
    extra: dict = field(default_factory=dict)  # more metadata, written as given


def llama3_factors(head_dim, base, factor, low, high, orig):
    """The divisors of each pair's frequency, as convert_hf_to_gguf.py computes rope_freqs."""
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def recipe(s: Shape, about=""):
    """The recipe of `s`: metadata as gguf-py's writer orders it, tensors as the converter
    lays them out, all F32."""
    hd = s.head_dim or s.n_embd // s.n_head
    a = s.arch
    r = Recipe(s.seed, about)
    r.kv("general.architecture", "string", a)
    r.kv("general.name", "string", f"tiny-{a}-synthetic")
    for key, v in (("context_length", s.n_ctx), ("embedding_length", s.n_embd),
                   ("block_count", s.n_layer), ("feed_forward_length", s.n_ff),
                   ("attention.head_count", s.n_head), ("attention.head_count_kv", s.n_head_kv)):
        r.kv(f"{a}.{key}", "u32", v)
    if s.head_dim is not None or a in ("qwen3", "qwen3moe"):
        r.kv(f"{a}.attention.key_length", "u32", hd)
        r.kv(f"{a}.attention.value_length", "u32", hd)
    r.kv(f"{a}.rope.freq_base", "f32", s.rope_base)
    r.kv(f"{a}.attention.layer_norm_rms_epsilon", "f32", s.rms_eps)
    r.kv(f"{a}.vocab_size", "u32", s.n_vocab)
    if s.scaling is not None:
        r.kv(f"{a}.rope.scaling.type", "string", s.scaling.kind)
        r.kv(f"{a}.rope.scaling.factor", "f32", s.scaling.factor)
        if s.scaling.original_context_length is not None:
            r.kv(f"{a}.rope.scaling.original_context_length", "u32",
                 s.scaling.original_context_length)
        if s.scaling.attn_factor is not None:
            r.kv(f"{a}.rope.scaling.attn_factor", "f32", s.scaling.attn_factor)
    if s.n_expert:
        r.kv(f"{a}.expert_count", "u32", s.n_expert)
        r.kv(f"{a}.expert_used_count", "u32", s.n_expert_used)
        if a == "qwen3moe":
            r.kv(f"{a}.expert_feed_forward_length", "u32", s.n_ff_exp)
    for k, v in s.extra.items():
        r.kv(k, "string" if isinstance(v, str) else "f32" if isinstance(v, float) else "u32", v)
    r.kv("tokenizer.ggml.model", "string", "no_vocab")
    r.kv("general.file_type", "u32", 0)

    def mat(name, rows, cols, *stack):  # ggml dims [cols, rows, *stack]
        r.normal(name, (cols, rows, *stack), 0, 1 / math.sqrt(cols))

    def norm(name, n):
        r.normal(name, (n,), 1, 0.1)

    def bias(name, n):
        r.normal(name, (n,), 0, 0.1)

    d, q_w, kv_w = s.n_embd, s.n_head * hd, s.n_head_kv * hd
    # Scaled as a projection, so a tied output gives logits of order 1 as an untied one does.
    mat("token_embd.weight", s.n_vocab, d)
    if not s.tied:
        mat("output.weight", s.n_vocab, d)
    norm("output_norm.weight", d)
    if s.llama3_rope is not None:
        factors = llama3_factors(hd, s.rope_base, *s.llama3_rope)
        r.values("rope_freqs.weight", (len(factors),), factors)
    biased = s.attn_bias or a == "qwen2"
    for i in range(s.n_layer):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight", d)
        for name, width in (("attn_q", q_w), ("attn_k", kv_w), ("attn_v", kv_w)):
            mat(b + name + ".weight", width, d)
            if biased:
                bias(b + name + ".bias", width)
        mat(b + "attn_output.weight", d, q_w)
        if s.attn_bias and a == "llama":
            bias(b + "attn_output.bias", d)
        if a in ("qwen3", "qwen3moe"):
            norm(b + "attn_q_norm.weight", hd)
            norm(b + "attn_k_norm.weight", hd)
        norm(b + "ffn_norm.weight", d)
        if s.n_expert:
            ff = s.n_ff_exp or s.n_ff
            e = s.n_expert
            mat(b + "ffn_gate_inp.weight", e, d)
            mat(b + "ffn_gate_exps.weight", ff, d, e)
            mat(b + "ffn_up_exps.weight", ff, d, e)
            mat(b + "ffn_down_exps.weight", d, ff, e)
        else:
            mat(b + "ffn_gate.weight", s.n_ff, d)
            mat(b + "ffn_up.weight", s.n_ff, d)
            mat(b + "ffn_down.weight", d, s.n_ff)
            if s.ffn_bias:
                bias(b + "ffn_gate.bias", s.n_ff)
                bias(b + "ffn_up.bias", s.n_ff)
                bias(b + "ffn_down.bias", d)
    return r
