"""Tiny random llama-family GGUF models, written as llama.cpp's converter lays them out.

A library for golden generators (tools/goldens/make_llama_family.py; the shape-space generator
can call it too): `Shape` says what to vary, `write(path, shape)` writes an F32 file, and
`quantize(src, dst, ftype)` makes a quantized copy with llama.cpp's own quantizer.

Needs the `gguf` package (pinned in .ci/requirements.txt) and, for `quantize`, llama-cpp-python.
"""
import ctypes
import math
from dataclasses import dataclass, field
from typing import Optional

import gguf
import numpy as np

# llama_ftype values of llama.cpp's quantizer (llama.h).
FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_m": 12,
          "q4_k_s": 14, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


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
    return np.array(out, dtype=np.float32)


def write(path, s: Shape):
    rng = np.random.default_rng(s.seed)
    hd = s.head_dim or s.n_embd // s.n_head
    a = s.arch
    w = gguf.GGUFWriter(path, a)
    w.add_name(f"tiny-{a}-synthetic")
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    if s.head_dim is not None or a in ("qwen3", "qwen3moe"):
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_vocab_size(s.n_vocab)
    if s.scaling is not None:
        kind = {"linear": gguf.RopeScalingType.LINEAR, "yarn": gguf.RopeScalingType.YARN}
        w.add_rope_scaling_type(kind[s.scaling.kind])
        w.add_rope_scaling_factor(s.scaling.factor)
        if s.scaling.original_context_length is not None:
            w.add_rope_scaling_orig_ctx_len(s.scaling.original_context_length)
        if s.scaling.attn_factor is not None:
            w.add_rope_scaling_attn_factors(s.scaling.attn_factor)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        if a == "qwen3moe":
            w.add_expert_feed_forward_length(s.n_ff_exp)
    for k, v in s.extra.items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, v)
    w.add_tokenizer_model("no_vocab")
    w.add_file_type(0)

    def mat(rows, cols, *stack):  # ggml dims [cols, rows, *stack]; numpy's shape is reversed
        return (rng.standard_normal((*stack[::-1], rows, cols)) / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    d, q_w, kv_w = s.n_embd, s.n_head * hd, s.n_head_kv * hd
    # Scaled as a projection, so a tied output gives logits of order 1 as an untied one does.
    w.add_tensor("token_embd.weight", mat(s.n_vocab, d))
    if not s.tied:
        w.add_tensor("output.weight", mat(s.n_vocab, d))
    w.add_tensor("output_norm.weight", norm(d))
    if s.llama3_rope is not None:
        w.add_tensor("rope_freqs.weight", llama3_factors(hd, s.rope_base, *s.llama3_rope))
    biased = s.attn_bias or a == "qwen2"
    for i in range(s.n_layer):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(d))
        for name, width in (("attn_q", q_w), ("attn_k", kv_w), ("attn_v", kv_w)):
            w.add_tensor(b + name + ".weight", mat(width, d))
            if biased:
                w.add_tensor(b + name + ".bias", bias(width))
        w.add_tensor(b + "attn_output.weight", mat(d, q_w))
        if s.attn_bias and a == "llama":
            w.add_tensor(b + "attn_output.bias", bias(d))
        if a in ("qwen3", "qwen3moe"):
            w.add_tensor(b + "attn_q_norm.weight", norm(hd))
            w.add_tensor(b + "attn_k_norm.weight", norm(hd))
        w.add_tensor(b + "ffn_norm.weight", norm(d))
        if s.n_expert:
            ff = s.n_ff_exp or s.n_ff
            e = s.n_expert
            w.add_tensor(b + "ffn_gate_inp.weight", mat(e, d))
            w.add_tensor(b + "ffn_gate_exps.weight", mat(ff, d, e))
            w.add_tensor(b + "ffn_up_exps.weight", mat(ff, d, e))
            w.add_tensor(b + "ffn_down_exps.weight", mat(d, ff, e))
        else:
            w.add_tensor(b + "ffn_gate.weight", mat(s.n_ff, d))
            w.add_tensor(b + "ffn_up.weight", mat(s.n_ff, d))
            w.add_tensor(b + "ffn_down.weight", mat(d, s.n_ff))
            if s.ffn_bias:
                w.add_tensor(b + "ffn_gate.bias", bias(s.n_ff))
                w.add_tensor(b + "ffn_up.bias", bias(s.n_ff))
                w.add_tensor(b + "ffn_down.bias", bias(d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src, dst, ftype):
    """llama.cpp's own quantizer (llama-cpp-python): `ftype` is a key of FTYPES."""
    import llama_cpp as L
    p = L.llama_model_quantize_default_params()
    p.ftype = FTYPES[ftype]
    p.nthread = 2
    rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
    assert rc == 0, f"quantize {src} -> {ftype}: {rc}"
