#!/bin/bash
# Decode attention's own combine writing its output as Q8_K too (FERROLM_ATTN_COMBINE_Q8K,
# session 32), one device call (writes under $OUT): cuda-parity, then tg128 at depth 0 and
# 16,384 with the switch on / off / on beside llama-bench (qwen3-8b and olmoe-1b-7b; at depth
# 0 qwen3-30b-a3b too), and one layer's attention launches under ncu. Pooled synth files.
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
# [PARITY=0] bash tools/device/combine_q8k_check.sh
source tools/device/carried.sh
pooled qwen3-8b olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  timeout 240 $B cuda-parity --seed 143 > $OUT/parity.txt 2>&1
  echo "parity rc=$? $(tail -1 $OUT/parity.txt) at $(( $(date +%s) - t0 )) s"
  grep '| FAIL |' $OUT/parity.txt | head
  echo "combine + Q8_K rows: $(grep -c 'combine + Q8_K' $OUT/parity.txt), exact: $(grep 'combine + Q8_K' $OUT/parity.txt | grep -c '| ok |')"
fi
tg() { timeout 90 $B bench -m $1 --backend cuda -p 0 -n 128 -r 2 ${2:+-d $2} 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in qwen3-8b olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf
  for d in 0 16384; do
    [ $P = qwen3-30b-a3b ] && [ $d != 0 ] && continue
    echo "== $P d$d llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -d $d -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
    for s in 1 0 1; do
      echo "== $P d$d FERROLM_ATTN_COMBINE_Q8K=$s: $(FERROLM_ATTN_COMBINE_Q8K=$s tg $F $d)"
    done
  done
done
echo "== ncu qwen3-8b d0: $(FERROLM_CUDA_GRAPH=0 ncu_line q8b-combine.txt -k regex:'attn_decode|quantize' \
  --launch-skip 40 --launch-count 6 --metrics gpu__time_duration.sum,launch__grid_size \
  $B bench -m $M/qwen3-8b-pooled.gguf --backend cuda -p 0 -n 2 -r 1)"
echo "end at $(( $(date +%s) - t0 )) s"
