#!/usr/bin/env python3
"""The loops of CUDA kernels' SASS, each a line: its address range, instructions, load
instructions, and its most common opcodes. For checking a kernel edit without a GPU: compare
a hot loop's size and loads before and after.

  FERROLM_AOT=0 FERROLM_CUBIN_DIR=/tmp/cubins cargo run --release -p ferrolm-cuda \\
      --example compile_one -- mmvq.cu
  python3 tools/perf/sass_loops.py /tmp/cubins/mmvq.sm_90a.cubin mmvq_wide_q4_k_n1

Needs `cuobjdump` on PATH (PyPI's nvidia-cuda-cuobjdump puts it in the site-packages'
nvidia/cu13/bin). A loop is a backward branch and the instructions it jumps over; loops of
an unrolled body nest, so an outer loop counts its inner ones too.
"""
import collections
import re
import subprocess
import sys


def instructions(cubin, function):
    """(address, text) of each instruction of `function` in `cubin`."""
    sass = subprocess.run(
        ["cuobjdump", "-sass", "-fun", function, cubin],
        capture_output=True, text=True, check=True,
    ).stdout
    return [(int(m.group(1), 16), m.group(2).strip())
            for m in re.finditer(r"/\*([0-9a-f]+)\*/\s+(.*?);", sass)]


def opcode(text):
    """The opcode without its predicate and modifiers (`@!P0 LDG.E.128` -> `LDG`)."""
    return re.sub(r"^@!?U?P\w+ ", "", text).split()[0].split(".")[0]


def loops(ins):
    """(first address, last address, body) of each backward branch's loop."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA (0x[0-9a-f]+)", t)
        if not m or "BRA.DIV" in t:
            continue
        target = int(m.group(1), 16)
        if target < a and target in index:
            yield target, a, [x for _, x in ins[index[target]:i + 1]]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cubin = sys.argv[1]
    for function in sys.argv[2:]:
        ins = instructions(cubin, function)
        local = sum(1 for _, t in ins if opcode(t) in ("LDL", "STL"))
        print(f"{function}: {len(ins)} instructions, {local} local loads and stores")
        for first, last, body in loops(ins):
            ops = collections.Counter(opcode(t) for t in body)
            loads = sum(ops[o] for o in ("LDG", "LD", "LDS", "LDL"))
            top = ", ".join(f"{o} {n}" for o, n in ops.most_common(8))
            print(f"  {first:#x}-{last:#x}: {len(body)} instructions, {loads} loads: {top}")


if __name__ == "__main__":
    main()
