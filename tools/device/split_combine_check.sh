#!/bin/bash
# Decode attention's split size with the combine in its own launch (the default since session
# 31), one device call (writes under $OUT): qwen3-8b and olmoe-1b-7b tg128 at 16,384 keys
# beside llama-bench, the plan's splits and fixed key counts (FERROLM_ATTN_SPLIT_KEYS; 512
# beat the plan's ~250 with the old combine in the walk); each setting's walk and combine
# launches under ncu. Pooled synth files. Usage, from the repo root, .device-carry/ from
# tools/device/pack.sh: [SPLITS="auto 384 512 768"] bash tools/device/split_combine_check.sh
source tools/device/carried.sh
SPLITS=${SPLITS:-"auto 384 512 768"}
pooled qwen3-8b olmoe-1b-7b
for P in qwen3-8b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench -d 16384 at $(( $(date +%s) - t0 )) s"
  timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -d 16384 -r 2 2>&1 | grep -E '^\| .*tg'
  for s in $SPLITS; do
    echo "== $P FERROLM_ATTN_SPLIT_KEYS=$s: $(FERROLM_ATTN_SPLIT_KEYS=$s timeout 60 $B bench -m $F --backend cuda -p 0 -n 128 -d 16384 -r 2 2>&1 | grep -E 'tg128|rror|panic')"
  done
  for s in $SPLITS; do
    echo "== ncu $P split keys $s: $(FERROLM_CUDA_GRAPH=0 FERROLM_ATTN_SPLIT_KEYS=$s ncu_line $P-split$s.txt \
      -k regex:attn_decode --launch-skip 40 --launch-count 4 \
      --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
      $B bench -m $F --backend cuda -p 0 -n 2 -d 16384 -r 1)"
  done
done
echo "end at $(( $(date +%s) - t0 )) s"
