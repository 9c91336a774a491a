#!/usr/bin/env python3
"""Bisect ferrolm against llama.cpp on one golden case: run both on the case's teacher-forced
token sequence (prompt + greedy, as crates/engine/tests/golden_tiny.rs builds it), dump every
named intermediate tensor, and report per tensor, in graph order, how many elements are not
bit-identical and the largest differences. The first non-identical tensor is the op to look at.

usage: bisect.py STEM CASE [FA]      e.g. bisect.py tiny-llama-q4_k_m 0

Needs a llama.cpp build and a small libllama driver (`dump MODEL FA OUTDIR id...`) that writes
`logits.f32` and each named F32 graph tensor as raw f32 through the eval callback (see
docs/parity.md). Paths come from the environment:
  GOLDEN   golden directory          (default ../shared/golden from the repo root)
  LLAMA    llama.cpp build/bin dir   (default /work/llamacpp/.../build/bin)
  DUMP     the driver                (default /work/llamacpp/tool/dump)
  FERROLM  ferrolm binary            (default target/release/ferrolm)
"""
import json, os, shutil, subprocess, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dumps  # noqa: E402

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLD = os.environ.get('GOLDEN', os.path.join(root, '..', 'shared', 'golden'))
LL = os.environ.get('LLAMA', '/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin')
DRIVER = os.environ.get('DUMP', '/work/llamacpp/tool/dump')
FER = os.environ.get('FERROLM', os.path.join(root, 'target', 'release', 'ferrolm'))

stem, case = sys.argv[1], int(sys.argv[2])
fa = sys.argv[3] if len(sys.argv) > 3 else '-1'
c = json.load(open(f'{GOLD}/{stem}.json'))['cases'][case]
ids = c['prompt'] + c['greedy'][:-1]
model = f'{GOLD}/{stem}.gguf'
a, b = f'/tmp/bisect_llama_{stem}', f'/tmp/bisect_ferrolm_{stem}'
for p in (a, b):
    shutil.rmtree(p, ignore_errors=True)
    os.makedirs(p)
subprocess.run([DRIVER, model, fa, a] + [str(i) for i in ids], check=True,
               env=dict(os.environ, LD_LIBRARY_PATH=LL, DUMP='all'),
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
out = subprocess.run([FER, 'logits', '-m', model, '--all', '--tokens', ' '.join(map(str, ids))],
                     env=dict(os.environ, FERROLM_DUMP_DIR=b), check=True,
                     capture_output=True, text=True).stdout
np.array(json.loads(out)['logits'], dtype=np.float32).tofile(f'{b}/logits.f32')

print(f'{stem} case {case}: {len(ids)} tokens')
first = dumps.compare(a, b, len(ids))
n_tok = len(ids)
ref = np.fromfile(f'{a}/logits.f32', dtype=np.float32).reshape(n_tok, -1)
ours = np.fromfile(f'{b}/logits.f32', dtype=np.float32).reshape(n_tok, -1)
print(f'top-1 against this llama.cpp: {int((ref.argmax(1) == ours.argmax(1)).sum())}/{n_tok};'
      f' first non-identical: {first}')
