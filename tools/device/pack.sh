#!/bin/bash
# Packs .device-carry/ for a device call, on this machine (from the repo root): ferrolm.xz (the
# release binary with sm_90a kernels, stripped, xz -9e) and llama.tar.xz (../shared/bench's
# llama.cpp, slimmed to llama-batched-bench and llama-bench with the libraries they load,
# stripped, xz -9e; LLAMA_BENCH=0 drops llama-bench too), then sums what a call would carry
# against its 64 MiB (tracked files as tar counts them, plus the carry). Where the sum passes,
# it says so: carry one file a call (carried.sh keeps what the warm machine has), or move
# goldens/ (9 MB the device scripts never read) aside for the call and back after it.
# Usage: [BUILD=0] [LLAMA_BENCH=0] bash tools/device/pack.sh
set -euo pipefail
D=.device-carry
mkdir -p $D
if [ "${BUILD:-1}" != 0 ]; then
  FERROLM_AOT_ARCHS=sm_90a cargo build --release -p ferrolm
fi
strip -o /tmp/ferrolm-stripped target/release/ferrolm
xz -T2 -9e -c /tmp/ferrolm-stripped > $D/ferrolm.xz
tmp=$(mktemp -d)
tar xJf ../shared/bench/llama.cpp-*-sm90.tar.xz -C $tmp
rm -f $tmp/llama-quantize $tmp/libllama-quantize-impl.so
if [ "${LLAMA_BENCH:-1}" = 0 ]; then rm -f $tmp/llama-bench $tmp/libllama-bench-impl.so; fi
strip --strip-unneeded $tmp/*.so.* $tmp/llama-* 2> /dev/null || true
(cd $tmp && tar cf - .) | xz -T2 -9e > $D/llama.tar.xz
rm -rf $tmp
python3 - <<'PY'
import os, subprocess
files = [f for f in subprocess.check_output(["git", "ls-files"]).decode().split("\n") if f and os.path.isfile(f)]
tree = sum(((os.path.getsize(f) + 511) // 512) * 512 + 512 for f in files)
gold = sum(((os.path.getsize(f) + 511) // 512) * 512 + 512 for f in files if f.startswith("goldens/"))
carry = {f: os.path.getsize(".device-carry/" + f) for f in os.listdir(".device-carry")}
limit = 64 * 2**20
total = tree + sum(carry.values())
print(f"tree {tree/1e6:.2f} MB (goldens {gold/1e6:.2f}), carry {', '.join(f'{k} {v/1e6:.2f} MB' for k, v in carry.items())}")
print(f"total {total/1e6:.2f} MB of {limit/1e6:.2f}: " + ("fits" if total < limit else
      "too large together; without goldens/ " + ("fits" if total - gold < limit else "still too large")))
PY
