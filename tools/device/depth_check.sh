#!/bin/bash
# Decode at depth (issue 15's -d 16384 bars), one device call (writes under $OUT): qwen3-8b
# and olmoe-1b-7b tg128 at 16,384 cached tokens beside llama-bench on the same pooled synth
# files, ferrolm with the decode attention's splits as the plan sets them and at fixed key
# counts (FERROLM_ATTN_SPLIT_KEYS: more, shorter splits make more waves of blocks); then each
# setting's attention launch under ncu: its duration, and the SMs' active cycles against the
# elapsed ones (session 31: 62 of 108 thousand at the plan's 66 splits, one wave of blocks).
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [SPLITS="auto 128 64 512"] bash tools/device/depth_check.sh
source tools/device/carried.sh
SPLITS=${SPLITS:-"auto 128 64 512"}
pooled qwen3-8b olmoe-1b-7b
echo "models at $(( $(date +%s) - t0 )) s"
for P in qwen3-8b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench -d 0,16384 at $(( $(date +%s) - t0 )) s"
  timeout 120 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -d 0,16384 -r 2 2>&1 | grep -E '^\| .*tg'
  for s in $SPLITS; do
    echo "== $P ferrolm FERROLM_ATTN_SPLIT_KEYS=$s: $(FERROLM_ATTN_SPLIT_KEYS=$s timeout 60 $B bench -m $F --backend cuda -p 0 -n 128 -d 16384 -r 2 2>&1 | grep -E 'tg128|rror|panic')"
  done
done
F=$M/qwen3-8b-pooled.gguf
for s in $SPLITS unfused; do
  # unfused: FERROLM_CUDA_FUSE=0, the combine in its own launch (a block a query head) after the
  # walk: the two launches' times apart.
  fuse=1; [ $s = unfused ] && fuse=0
  echo "== ncu split keys $s: $(FERROLM_CUDA_FUSE=$fuse FERROLM_CUDA_GRAPH=0 FERROLM_ATTN_SPLIT_KEYS=${s/unfused/auto} \
    ncu_line attn-split$s.txt -k regex:attn_decode --launch-skip 40 --launch-count 2 \
    --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_elapsed.max,sm__ctas_launched.min,sm__ctas_launched.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
    $B bench -m $F --backend cuda -p 0 -n 2 -d 16384 -r 1)"
done
echo "end at $(( $(date +%s) - t0 )) s"
