#!/usr/bin/env python3
"""llama.cpp's graph tensors for one token sequence, through llama-cpp-python's eval callback
(no llama.cpp build needed): every contiguous F32 tensor named like the ones dumps.NAMES lists
(`attn_norm-0`, `Qcur-0`, ..., `result_output` as `logits`) is written as raw f32 to
OUT_DIR/NAME.f32, the last write of a name winning, as ferrolm's FERROLM_DUMP_DIR does. One
batch of all the ids, llama.cpp's defaults (flash attention auto, F16 KV cache) unless
`precise`.

usage: llama_dump.py MODEL OUT_DIR [--precise] ID [ID...]
Compare with ferrolm: `FERROLM_DUMP_DIR=B ferrolm logits -m MODEL --all --tokens "IDS"`, then
`python3 -c 'import dumps; dumps.compare(A, B, n)'` (or tools/parity/compare_llama.py).
"""
import ctypes
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# This folder's bisect.py would shadow the standard library's, which numpy imports.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
import numpy as np  # noqa: E402
import llama_cpp as L  # noqa: E402

_spec = importlib.util.spec_from_file_location("dumps", os.path.join(HERE, "dumps.py"))
dumps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dumps)


class Tensor(ctypes.Structure):
    """ggml.h's struct ggml_tensor (GGML_MAX_DIMS 4, GGML_MAX_SRC 10, GGML_MAX_NAME 64)."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p),
                ("padding", ctypes.c_char * 8)]


def wanted(name):
    return name == "result_output" or name.rsplit("-", 1)[0] in dumps.NAMES


def dump(model_path, out_dir, ids, precise=False):
    os.makedirs(out_dir, exist_ok=True)

    def cb(t, ask, _user):
        t = ctypes.cast(t, ctypes.POINTER(Tensor)).contents
        name = t.name.decode()
        if ask:
            return wanted(name)
        ne = list(t.ne)
        contiguous = t.nb[0] == 4 and all(t.nb[i] == t.nb[i - 1] * ne[i - 1] for i in (1, 2, 3))
        if t.type == 0 and contiguous and wanted(name) and t.data:
            n = int(np.prod(ne))
            a = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_float)), (n,))
            a.tofile(os.path.join(out_dir, "logits.f32" if name == "result_output" else f"{name}.f32"))
        return True

    keep = L.ggml_backend_sched_eval_callback(cb)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 1024
    cp.n_threads = cp.n_threads_batch = 2
    if precise:
        cp.flash_attn_type = 0; cp.type_k = 0; cp.type_v = 0
    cp.cb_eval = keep
    ctx = L.llama_init_from_model(model, cp)
    b = L.llama_batch_init(len(ids), 0, 1)
    for i, t in enumerate(ids):
        b.token[i] = t; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1
    b.n_tokens = len(ids)
    assert L.llama_decode(ctx, b) == 0
    L.llama_batch_free(b)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    args = sys.argv[1:]
    precise = "--precise" in args
    args = [a for a in args if a != "--precise"]
    dump(args[0], args[1], [int(x) for x in args[2:]], precise)
