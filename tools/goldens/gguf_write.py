"""A minimal GGUF v3 writer for random F32 test models (no gguf-py in the llama.cpp venv).

Metadata values are (type, value) pairs of the GGUF scalar types used here; tensors are numpy
float32 arrays whose C order is ggml's: a numpy shape (n2, n1, n0) is written as ne = [n0, n1, n2].
"""
import struct

import numpy as np

U32, F32, STRING = 4, 6, 8
ALIGN = 32


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(ty, v):
    if ty == U32:
        return struct.pack("<I", v)
    if ty == F32:
        return struct.pack("<f", v)
    if ty == STRING:
        return _str(v)
    raise ValueError(f"GGUF type {ty} is not written here")


def write(path, metadata, tensors):
    """metadata: {key: (type, value)}; tensors: [(name, np.ndarray float32)] in file order."""
    head = bytearray(b"GGUF")
    head += struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, (ty, v) in metadata.items():
        head += _str(k) + struct.pack("<I", ty) + _value(ty, v)
    offset, blobs = 0, []
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype=np.float32)
        head += _str(name) + struct.pack("<I", a.ndim)
        head += b"".join(struct.pack("<Q", n) for n in reversed(a.shape))
        head += struct.pack("<IQ", 0, offset)  # type 0 = F32
        blobs.append(a.tobytes())
        offset += -(-a.nbytes // ALIGN) * ALIGN
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b + b"\0" * (-len(b) % ALIGN))
