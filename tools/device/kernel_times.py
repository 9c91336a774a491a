#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log by kernel name.

Usage: kernel_times.py LOG [DIVISOR]
Prints each kernel's launches and total microseconds (divided by DIVISOR, e.g. the number of
prompt passes the profiled run made), largest first, and the total.
"""
import csv
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    div = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    with open(path, newline="") as f:
        # ncu prints its own banner lines before the CSV header.
        lines = [l for l in f if l.startswith('"')]
    total = defaultdict(float)
    count = defaultdict(int)
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0]
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        total[name] += value * scale / div
        count[name] += 1
    grand = sum(total.values())
    print(f"{'kernel':<44} {'launches':>8} {'us':>10} {'share':>6}")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{name:<44} {count[name]:>8} {us:>10.1f} {100 * us / grand:>5.1f}%")
    print(f"{'total':<44} {sum(count.values()):>8} {grand:>10.1f}")


if __name__ == "__main__":
    main()
