"""Tensor-by-tensor comparison of two dump directories (ferrolm's FERROLM_DUMP_DIR files, or
llama.cpp's eval-callback dumps under the same names), in graph order."""
import os

import numpy as np

NAMES = ['attn_norm', 'Qpre', 'Qcur', 'Kcur', 'Vcur', 'kqv_out', 'attn_out',
         'attn_post_norm', 'ffn_inp', 'ffn_norm', 'ffn_gate', 'ffn_up', 'ffn_swiglu', 'ffn_out',
         'ffn_post_norm', 'l_out']


def compare(a, b, n_tok):
    """Print, per tensor present in both, how many elements are not bit-identical; return the
    first such tensor's name (None if all agree)."""
    layers = [il for il in range(256) if os.path.exists(f'{b}/attn_norm-{il}.f32')]
    order = [f'{n}-{il}' for il in layers for n in NAMES] + ['logits']
    first = None
    for n in order:
        pa, pb = f'{a}/{n}.f32', f'{b}/{n}.f32'
        if not (os.path.exists(pa) and os.path.exists(pb)):
            continue
        x, y = np.fromfile(pa, dtype=np.float32), np.fromfile(pb, dtype=np.float32)
        if x.size != y.size:
            print(f'{n:14s} sizes differ: {x.size} vs {y.size}')
            continue
        bad = x.view(np.uint32) != y.view(np.uint32)
        diff = np.abs(x - y)
        rel = diff / np.maximum(np.abs(x), 1e-30)
        rows = sorted(set((np.nonzero(bad)[0] // (x.size // n_tok)).tolist()))
        more = '...' if len(rows) > 8 else ''
        print(f'{n:14s} not identical {int(bad.sum()):7d}/{x.size:7d}  max abs {diff.max():.3e}'
              f'  max rel {rel.max():.3e}  rows {rows[:8]}{more}')
        if bad.any() and first is None:
            first = n
    return first
