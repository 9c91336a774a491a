#!/usr/bin/env python3
"""ferrolm's CUDA backend against its CPU backend on one golden case, tensor by tensor: both
run the case's teacher-forced sequence with FERROLM_DUMP_DIR, and every named intermediate is
compared in graph order (dumps.compare). The first non-identical tensor is the op whose CUDA
arithmetic departs from the CPU's. Runs on the GPU machine.

usage: backends.py FERROLM GOLDEN_DIR STEM CASE [extra ferrolm args...]
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dumps  # noqa: E402

fer, gold, stem, case = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5:]
c = json.load(open(f'{gold}/{stem}.json'))['cases'][case]
ids = c['prompt'] + c['greedy'][:-1]
dirs = {}
for backend in ('cpu', 'cuda'):
    d = dirs[backend] = f'/tmp/backends_{stem}_{backend}'
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    out = subprocess.run([fer, 'logits', '-m', f'{gold}/{stem}.gguf', '--all', '-c', '256',
                          '--backend', backend, '--tokens', ' '.join(map(str, ids))] + extra,
                         env=dict(os.environ, FERROLM_DUMP_DIR=d), check=True,
                         capture_output=True, text=True).stdout
    np.array(json.loads(out)['logits'], dtype=np.float32).tofile(f'{d}/logits.f32')
print(f'{stem} case {case}: {len(ids)} tokens, cpu against cuda')
first = dumps.compare(dirs['cpu'], dirs['cuda'], len(ids))
print(f'first non-identical: {first}')
