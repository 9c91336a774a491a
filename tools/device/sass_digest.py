#!/usr/bin/env python3
"""A digest of one kernel launch's SASS source page (ncu --page source --csv --print-source
sass): its warps' executed instructions by how often a line ran (loop structure), the opcodes a
warp executes, the stall reasons' shares and the lines with most stall samples. What a
latency-bound kernel's time follows is a warp's instruction count and its memory round trips;
this shows both without the 10-20 MB CSV.

  python3 tools/device/sass_digest.py FILE.sass.csv [WARPS]

The CSV may hold several launches, one after another. WARPS: the launch's warps (default: how
often the first line ran, for a kernel whose every warp runs its entry)."""
import collections
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    # One kernel after another: a "Kernel Name" row, the header, then its lines.
    starts = [i for i, r in enumerate(rows) if r and r[0] == "Kernel Name"] + [len(rows)]
    for a, b in zip(starts, starts[1:]):
        digest(rows[a:b])


def digest(rows):
    name = rows[0][1] if len(rows[0]) > 1 else "?"
    hdr, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(hdr)}
    ex, src, smp = col["Instructions Executed"], col["Source"], col["Warp Stall Sampling (All Samples)"]
    runs = [(r, float(r[ex] or 0)) for r in data]
    runs = [(r, e) for r, e in runs if e > 0]
    if not runs:
        print(name, "no executed lines")
        return
    warps = float(sys.argv[2]) if len(sys.argv) > 2 else float(runs[0][1])
    total = sum(e for _, e in runs)
    print(f"== {name}: {total:.0f} instructions, {warps:.0f} warps (entry line), "
          f"{total / warps:.0f} a warp")
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    ops = collections.Counter()
    for r, e in runs:
        k = round(e / warps, 3)
        by[k][0] += 1
        by[k][1] += e / warps
        by[k][2] += float(r[smp] or 0)
        s = r[src].strip().split()
        op = (s[1] if s[0].startswith("@") else s[0]).split(".")[0]
        ops[op] += e / warps
    for k in sorted(by):
        n, per, st = by[k]
        print(f"  lines run {k}x a warp: {n} lines, {per:.0f} a warp, {st:.0f} samples")
    print("  a warp's opcodes:", ", ".join(f"{o} {c:.0f}" for o, c in ops.most_common(18)))
    stalls = {h: sum(float(r[i] or 0) for r in data) for h, i in col.items()
              if h.startswith("stall_") and "Not Issued" not in h}
    all_s = sum(stalls.values()) or 1
    print("  stalls:", ", ".join(f"{h[6:]} {v / all_s * 100:.0f}%"
                                 for h, v in sorted(stalls.items(), key=lambda x: -x[1]) if v / all_s >= 0.02))
    # Order of memory and barrier instructions along the entry path, for round trips.
    seq = []
    for i, (r, e) in enumerate(runs):
        s = r[src].strip().split()
        op = (s[1] if s[0].startswith("@") else s[0]).split(".")[0]
        if op in ("LDG", "LDL", "STL", "LDS", "STS", "STG", "BAR", "ATOMG", "RED", "MEMBAR", "LDGSTS",
                  "DEPBAR", "SHFL", "EXIT", "ERRBAR", "CCTL"):
            seq.append(f"{i}:{op}" + ("" if abs(e / warps - 1) < 1e-3 else f"x{e / warps:.2f}")
                       + (f"[{int(float(r[smp] or 0))}]" if float(r[smp] or 0) >= 5 else ""))
    print("  memory/barrier order:", " ".join(seq))
    top = sorted(runs, key=lambda x: -float(x[0][smp] or 0))[:15]
    print("  most sampled:", "; ".join(f"{r[src].strip()[:40]} ({int(float(r[smp] or 0))}, x{e / warps:.2f})"
                                       for r, e in top))


main()
