#!/usr/bin/env python3
"""llama.cpp goldens with a quantized KV cache, for `-ctk`/`-ctv` parity (tests: crates/cli/tests/kv_cache.rs).

Made as golden_lib.py makes every golden here, with type_k = type_v = the cache type and flash
attention on (llama.cpp requires it for a quantized V cache). The models are the tiny goldens'
(../shared/golden, not in this repository); the prompts are the first cases of the model's
golden beside it (lengths 7 and 33); 8 greedy steps; logits to 5 significant digits.

usage: make_kv_goldens.py GOLDEN_DIR OUT_DIR CACHE_TYPE STEM [STEM...]
  e.g. make_kv_goldens.py ../shared/golden goldens/kv-cache q8_0 tiny-llama-q8_0 tiny-qwen3-q4_k_m
writes OUT_DIR/STEM-kv{CACHE_TYPE}.json.gz (run with /work/venv-llama/bin/python)
"""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_lib import kv_cache, run_cases, write_golden  # noqa: E402

CASES = 2
GREEDY = 8


def read_json(path):
    """A golden, compressed or not."""
    if os.path.exists(path + ".gz"):
        return json.load(gzip.open(path + ".gz"))
    return json.load(open(path))


def make(gdir, out_dir, cache_type, stem):
    prompts = [c["prompt"] for c in read_json(f"{gdir}/{stem}.json")["cases"][:CASES]]
    cfg = kv_cache(cache_type)
    nv, cases = run_cases(f"{gdir}/{stem}.gguf", cfg, prompts, GREEDY, 5)
    out = f"{out_dir}/{stem}-kv{cache_type}.json.gz"
    write_golden(out, dict(model=f"{stem}.gguf"), nv, cfg, cases)
    print(out)


if __name__ == "__main__":
    gdir, out_dir, cache_type, stems = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    os.makedirs(out_dir, exist_ok=True)
    for stem in stems:
        make(gdir, out_dir, cache_type, stem)
