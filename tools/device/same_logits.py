#!/usr/bin/env python3
"""Compares two `ferrolm logits` JSON outputs: bit-identical (no tolerance given) or within
a max |dlogit| bound, and prints top-1 agreement. Exit status 1 when the check fails.

usage: same_logits.py A.json B.json [MAX_ABS]
"""
import json
import sys

import numpy as np

a = np.array(json.load(open(sys.argv[1]))["logits"], dtype=np.float32)
b = np.array(json.load(open(sys.argv[2]))["logits"], dtype=np.float32)
tol = float(sys.argv[3]) if len(sys.argv) > 3 else None
d = float(np.abs(a - b).max())
top1 = int((a.argmax(-1) == b.argmax(-1)).sum())
ok = (d == 0.0) if tol is None else (d <= tol)
want = "bit-identical" if tol is None else f"max |d| <= {tol}"
print(f"{'PASS' if ok else 'FAIL'} {sys.argv[1]} vs {sys.argv[2]}: max |d| {d:.3e} "
      f"(want {want}), top-1 {top1}/{len(a)}")
sys.exit(0 if ok else 1)
