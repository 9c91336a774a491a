#!/bin/bash
# Session 45's third call: what a decode token costs outside its kernels, and the output
# head's mat-vec. (1) tg128 with every kernel left out (FERROLM_TIMING_SKIP of every first
# letter: the graph replays with no launches, so the step is the host's loop, the inputs'
# upload, the graph launch and the logits' copy to the host), beside the whole step, for
# qwen3-30b-a3b and olmoe-1b-7b; (2) ncu of one token's mat-vecs (mmvq_wide_q: the o
# projections and the output head; graphs off) for time, DRAM throughput and grid.
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [STEP=0 (skips (1))] bash tools/device/s45_probe.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b
ALL=FERROLM_TIMING_SKIP=$(echo {a..z} | tr ' ' ',')
if [ "${STEP:-1}" = 1 ]; then
  for P in qwen3-30b-a3b olmoe-1b-7b; do
    F=$M/$P-pooled.gguf; EXTRA=
    echo "== $P whole $(tg128 A=0) / no kernels $(tg128 $ALL) / whole $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
  done
fi
for P in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  FERROLM_CUDA_GRAPH=0 timeout 200 ncu --clock-control none --cache-control none -k regex:'^mmvq_wide_q' \
    --launch-skip 60 --launch-count 60 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,dram__bytes_read.sum \
    $B bench -m $F --backend cuda -p 0 -n 3 -r 1 > $OUT/head-$P.txt 2>&1
  echo "== $P ncu rc=$?"
  python3 - $OUT/head-$P.txt <<'PY'
import re, sys
rows, cur = [], None
for line in open(sys.argv[1]):
    m = re.match(r'\s+(mmvq_wide_q\w*)', line)
    if m: cur = {'k': m.group(1)}; rows.append(cur); continue
    m = re.match(r'\s+(\S+)\s+(\S+)\s+([\d.,]+)\s*$', line)
    if cur is not None and m: cur[m.group(1)] = m.group(3)
big = {}
for r in rows:
    key = (r['k'], r.get('launch__grid_size'))
    big.setdefault(key, []).append(r)
for (k, g), rs in big.items():
    t = [float(r.get('gpu__time_duration.sum', '0').replace(',', '')) for r in rs]
    d = [r.get('dram__throughput.avg.pct_of_peak_sustained_elapsed') for r in rs]
    b = [r.get('dram__bytes_read.sum') for r in rs]
    print(k, 'grid', g, 'launches', len(rs), 'time', min(t), max(t), 'dram%', d[:2], 'bytes', b[:2])
PY
done
echo "end at $(( $(date +%s) - t0 )) s"
