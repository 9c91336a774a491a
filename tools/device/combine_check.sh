#!/bin/bash
# Decode attention's combine (session 31: in its own launch past 16 splits; in the walk, a
# KV group's heads side by side), one device call (writes under $OUT): cuda-parity; qwen3-8b
# and olmoe-1b-7b tg128 at depth 0 and 16,384 beside llama-bench (pooled synth files), the
# plan's choice, the combine always in its own launch and always in the walk
# (FERROLM_ATTN_COMBINE_WALK auto / 0 / 1; session 31's call 5 ran it when auto meant the walk
# up to 16 splits; since then auto is 0, the own launch); qwen3-30b-a3b tg128 (8 query heads a group) auto
# and 0; the attention's launches at 16,384 keys under ncu, and the walk's SASS stalls. Usage, from the repo root, .device-carry/
# from tools/device/pack.sh: [PARITY=0] bash tools/device/combine_check.sh
source tools/device/carried.sh
pooled qwen3-8b olmoe-1b-7b qwen3-30b-a3b
for P in qwen3-8b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench -d 0,16384 at $(( $(date +%s) - t0 )) s"
  timeout 120 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -d 0,16384 -r 2 2>&1 | grep -E '^\| .*tg'
  for s in auto 0 1 auto; do
    echo "== $P ferrolm FERROLM_ATTN_COMBINE_WALK=$s"
    FERROLM_ATTN_COMBINE_WALK=$s timeout 60 $B bench -m $F --backend cuda -p 0 -n 128 -d 0,16384 -r 2 2>&1 | grep -E 'tg128|rror|panic'
  done
done
F=$M/qwen3-30b-a3b-pooled.gguf
echo "== qwen3-30b-a3b llama-bench at $(( $(date +%s) - t0 )) s"
timeout 60 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg'
for s in auto 0 auto 0; do
  echo "== qwen3-30b-a3b FERROLM_ATTN_COMBINE_WALK=$s: $(FERROLM_ATTN_COMBINE_WALK=$s timeout 60 $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic')"
done
for s in auto 0; do
  echo "== ncu qwen3-30b-a3b a few keys, COMBINE_WALK=$s: $(FERROLM_ATTN_COMBINE_WALK=$s FERROLM_CUDA_GRAPH=0 \
    ncu_line attn30-$s.txt -k regex:attn_decode --launch-skip 96 --launch-count 4 \
    --metrics gpu__time_duration.sum $B bench -m $F --backend cuda -p 0 -n 8 -r 1)"
done
F=$M/qwen3-8b-pooled.gguf
echo "== ncu at 16384 keys: $(FERROLM_CUDA_GRAPH=0 ncu_line attn-own.txt \
  -k regex:attn_decode --launch-skip 40 --launch-count 4 \
  --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
  $B bench -m $F --backend cuda -p 0 -n 2 -d 16384 -r 1)"
if [ "${PARITY:-1}" != 0 ]; then
  timeout 240 $B cuda-parity --seed 131 > $OUT/parity.txt 2>&1
  echo "parity rc=$? $(tail -1 $OUT/parity.txt) at $(( $(date +%s) - t0 )) s"
  grep -E "FAIL" $OUT/parity.txt | head -10
fi
# The walk's instructions with their stall samples (SASS, one launch), for reading offline.
FERROLM_CUDA_GRAPH=0 timeout 120 ncu --clock-control none --cache-control none \
  -k regex:attn_decode_group --launch-skip 20 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --page source --print-source sass --csv \
  $B bench -m $F --backend cuda -p 0 -n 2 -d 16384 -r 1 > $OUT/attn-sass.csv 2> $OUT/attn-sass.err
echo "sass rc=$? $(wc -l < $OUT/attn-sass.csv) lines"
echo "end at $(( $(date +%s) - t0 )) s"
