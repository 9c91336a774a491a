#!/usr/bin/env python3
"""On the GPU machine: the golden criteria of crates/engine/tests/golden_tiny.rs, through the CLI.

The Rust golden tests run on a GPU with FERROLM_TEST_BACKEND=cuda, but each test binary embeds
the AOT cubins and the device run can carry only so much. This drives `ferrolm logits --all`
instead and applies the same bars: F32 files max |dlogit| <= 2e-2 and no top-1 miss where
llama.cpp's margin is >= 0.05; quantized files top-1 agreement >= 97% and p95 |dlogit| <= 0.1.

usage: golden_check.py FERROLM GOLDEN_DIR [STEM...]   (extra args after -- go to ferrolm)
No STEM: every golden (*.json or *.json.gz) in GOLDEN_DIR, e.g. goldens/shape-space. A golden
that names a recipe (goldens/shape-space, llama-family, gpt-oss) has its model made by
`FERROLM synth --recipe` into a temporary folder first, and checked against the golden's
sha256 (a mismatch is a FAIL: the file is not the one llama.cpp ran). Otherwise the model is
the file the golden names, in GOLDEN_DIR or, when set, $GOLDEN_MODELS (the goldens of
goldens/kv-cache name the files of ../shared/golden).

Shape-space goldens listed in KNOWN_GAPS of crates/engine/tests/golden_shape_space.rs are held
there to a looser top-1 bar; this script applies the full bar and prints them as FAIL, with
`(known gap)`, without failing the run for them.
"""
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# As crates/engine/tests/golden_shape_space.rs's KNOWN_GAPS: stem -> top-1 floor (percent).
KNOWN_GAPS = {}


def read(path):
    return json.load(gzip.open(path) if path.endswith(".gz") else open(path))


def golden_path(gdir, stem):
    """STEM.json.gz, or STEM.json where there is no compressed one (../shared/golden)."""
    plain = os.path.join(gdir, f"{stem}.json")
    return plain + ".gz" if os.path.exists(plain + ".gz") else plain


def model_for(ferrolm, gdir, g, tmp):
    """The golden's model: made from its recipe (sha256-checked), or found by name."""
    if "recipe" not in g:
        return os.path.join(os.environ.get("GOLDEN_MODELS", gdir), g["model"]), None
    path = os.path.join(tmp, g["model"])
    if not os.path.exists(path):
        subprocess.run([ferrolm, "synth", "--recipe", os.path.join(gdir, g["recipe"]),
                        "--type", g["type"], "-o", path], check=True, capture_output=True)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if sha != g["model_sha256"]:
        return path, f"model sha256 {sha[:12]}… is not llama.cpp's {g['model_sha256'][:12]}…"
    return path, None


def check(ferrolm, gdir, stem, extra, tmp):
    g = read(golden_path(gdir, stem))
    model, wrong = model_for(ferrolm, gdir, g, tmp)
    if wrong:
        print(f"FAIL {stem}: {wrong}", flush=True)
        return False
    diffs, agree, total, clear = [], 0, 0, 0
    for c in g["cases"]:
        tokens = c["prompt"] + c["greedy"][:-1]
        want = np.array(c["prompt_logits"] + c["greedy_logits"][1:], dtype=np.float64)
        cmd = [ferrolm, "logits", "-m", model, "--all", "-c", "256",
               "--tokens", " ".join(map(str, tokens))] + extra
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            # One model that cannot run is a FAIL of its own, not the end of the run.
            why = (run.stderr.strip().splitlines() or ["no message"])[-1]
            print(f"FAIL {stem}: ferrolm exited {run.returncode}: {why}", flush=True)
            return False
        out = run.stdout
        got = np.array(json.loads(out)["logits"], dtype=np.float64)[: len(want)]
        diffs.append(np.abs(got - want).ravel())
        for a, w in zip(got, want):
            total += 1
            if a.argmax() == w.argmax():
                agree += 1
            else:
                top = np.sort(w)[::-1]
                clear += top[0] - top[1] >= 0.05
    d = np.concatenate(diffs)
    mx, p95 = d.max(), np.sort(d)[len(d) * 95 // 100]
    if stem.endswith("f32"):
        ok = mx <= 2e-2 and clear == 0
    else:
        ok = agree * 100 >= total * 97 and p95 <= 0.1
    gap = KNOWN_GAPS.get(stem) if os.path.basename(os.path.normpath(gdir)) == "shape-space" else None
    note = f" (known gap, floor {gap}%)" if gap and not ok else ""
    print(f"{'PASS' if ok else 'FAIL'} {stem}: max |d| {mx:.3e}, p95 |d| {p95:.3e}, "
          f"top-1 {agree}/{total} ({clear} clear misses){note}", flush=True)
    if gap and not ok:
        return agree * 100 >= total * gap and p95 <= 0.1
    return ok


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    ferrolm, gdir, stems = args[0], args[1], args[2:]
    if not stems:
        stems = sorted({f.split(".json")[0] for f in os.listdir(gdir)
                        if f.endswith((".json", ".json.gz")) and not f.endswith(".recipe.json")})
    with tempfile.TemporaryDirectory() as tmp:
        results = [check(ferrolm, gdir, s, extra, tmp) for s in stems]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
