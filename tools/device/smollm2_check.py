#!/usr/bin/env python3
"""SmolLM2-135M-Instruct on the GPU: the bars of crates/engine/tests/golden_smollm2.rs, and CUDA
against the CPU, through the CLI (the Rust test binaries cannot travel with the model file).

Each golden prompt runs teacher-forced (prompt + llama.cpp's greedy tokens) in one pass:
  - per prompt at most 1 top-1 miss against llama.cpp where its top-2 margin is >= 0.1;
  - CUDA's top-1 against the CPU's on every position: the share that agree (issue bar: 98%).

usage: smollm2_check.py FERROLM MODEL GOLDEN_JSON [-- extra ferrolm args for the CUDA run]
(GPU_BACKEND=cpu runs the script's own check on a machine without a GPU.)
"""
import json
import os
import subprocess
import sys


def top1(ferrolm, model, tokens, extra):
    cmd = [ferrolm, "logits", "-m", model, "--all", "--top", "2", "-c", "512",
           "--tokens", " ".join(map(str, tokens))] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [row[0][0] for row in json.loads(out)["top"]]


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    ferrolm, model, golden = args[:3]
    ok, agree, total = True, 0, 0
    for case in json.load(open(golden))["generate"]:
        prompt, greedy = case["prompt_ids"], case["greedy"]
        tokens = prompt + greedy[:-1]
        gpu = top1(ferrolm, model, tokens, ["--backend", os.environ.get("GPU_BACKEND", "cuda")] + extra)
        cpu = top1(ferrolm, model, tokens, ["--backend", "cpu"])
        agree += sum(g == c for g, c in zip(gpu, cpu))
        total += len(tokens)
        clear = misses = 0
        for step, top8 in enumerate(case["top8_per_step"]):
            if top8[0][1] - top8[1][1] < 0.1:
                continue
            clear += 1
            misses += gpu[len(prompt) - 1 + step] != greedy[step]
        ok &= misses <= 1
        print(f"{case['text'][:24]!r}: {misses} misses of {clear} clear steps")
    share = agree / total
    print(f"CUDA vs CPU top-1: {agree}/{total} ({100 * share:.1f}%)")
    print("PASS" if ok and share >= 0.98 else "FAIL")
    sys.exit(0 if ok and share >= 0.98 else 1)


if __name__ == "__main__":
    main()
