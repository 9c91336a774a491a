#!/usr/bin/env python3
"""`ferrolm perplexity` on CUDA against the CPU (issue 18's bar: within 0.5%), and both against
llama.cpp's figures in crates/cli/tests/perplexity/llama_cpp.json (the cases the CPU test runs).

usage: perplexity_check.py FERROLM SMOLLM2.gguf GOLDEN_DIR [-- extra ferrolm args for both runs]
(GPU_BACKEND=cpu runs the script's own check on a machine without a GPU.)

Cases: the golden cases (SmolLM2 on the test text, -c 256; the four tiny models on the text's
bytes, -c 256), then SmolLM2 on the test text at llama-perplexity's default -c 512. The bars are
on the final values (0.5%); the worst running value is shown beside them (SmolLM2's early
windows carry the noise of its arithmetic, see docs/parity.md). Exit status 1 when a bar fails.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
DATA = os.path.join(ROOT, "crates/cli/tests/perplexity")
TINY = ["tiny-llama-f32", "tiny-qwen3-q8_0", "tiny-olmoe-q4_k_m", "tiny-qwen3moe-q8_0"]


def perplexity(ferrolm, backend, args, extra):
    cmd = [ferrolm, "perplexity", "--backend", backend] + args + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr}")
    running_line, final = out.stdout.strip().splitlines()[-2:]
    running = [float(item.split("]")[1]) for item in running_line.split(",") if item]
    ppl, err = final.removeprefix("Final estimate: PPL = ").split(" +/- ")
    return running, float(ppl), float(err)


def worst(a, b):
    return max(abs(x - y) / y for x, y in zip(a, b))


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    ferrolm, smollm2, golden_dir = args[:3]
    gpu = os.environ.get("GPU_BACKEND", "cuda")
    ref = json.load(open(os.path.join(DATA, "llama_cpp.json")))["cases"]
    text = os.path.join(DATA, "text.txt")
    ids = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(list(open(text, "rb").read()), ids)
    ids.close()
    cases = [("smollm2", ["-m", smollm2, "-f", text, "-c", "256"])]
    cases += [(t, ["-m", os.path.join(golden_dir, t + ".gguf"), "--ids", ids.name, "-c", "256"])
              for t in TINY]
    cases.append(("smollm2 -c 512", ["-m", smollm2, "-f", text]))
    ok = True
    print(f"{'case':<20} {'cpu':>10} {gpu:>10} {'llama.cpp':>10}   {gpu}/cpu (worst running)   cpu/llama.cpp (worst running)")
    for name, a in cases:
        c_run, c_ppl, _ = perplexity(ferrolm, "cpu", a, extra)
        g_run, g_ppl, _ = perplexity(ferrolm, gpu, a, extra)
        d_gpu = abs(g_ppl - c_ppl) / c_ppl
        line = f"{name:<20} {c_ppl:>10.4f} {g_ppl:>10.4f}"
        line += f" {'-':>10}" if name not in ref else f" {ref[name]['ppl']:>10.4f}"
        line += f"   {100 * d_gpu:6.3f}% ({100 * worst(g_run, c_run):.3f}%)"
        good = d_gpu <= 0.005
        if name in ref:
            r = ref[name]
            d_ref = abs(c_ppl - r["ppl"]) / r["ppl"]
            line += f"   {100 * d_ref:6.3f}% ({100 * worst(c_run, r['running']):.3f}%)"
            good = good and d_ref <= 0.005
        print(line + ("" if good else "  FAIL"))
        ok = ok and good
    os.unlink(ids.name)
    print("perplexity check:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
