#!/bin/bash
# Session 39's first call: the MoE bars with session 38's defaults beside llama-bench (tg128
# of OLMoE and qwen3-30b-a3b, OLMoE at -d 16384), OLMoE's depth with other split sizes, then
# one launch each under ncu at 16,384 keys: ferrolm's OLMoE walk and llama.cpp's decode
# attention, for their DRAM throughput side by side. Usage, from the repo root, .device-carry/
# holding ferrolm.xz and llama.tar.xz: bash tools/device/s39_first.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b
tg() { timeout 120 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 $EXTRA 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
lb() { timeout 200 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 $EXTRA 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}'; }
for P in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf; EXTRA=
  echo "== $P llama-bench $(lb) ferrolm $(tg A=0) / $(tg A=0) at $(( $(date +%s) - t0 )) s"
done
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA="-d 16384"
echo "== olmoe d16384 llama-bench $(lb) ferrolm $(tg A=0) at $(( $(date +%s) - t0 )) s"
for k in 256 1024; do echo "== olmoe d16384 FERROLM_ATTN_SPLIT_KEYS=$k $(tg FERROLM_ATTN_SPLIT_KEYS=$k)"; done
NCU="ncu --clock-control none --cache-control none --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats \
  --metrics dram__bytes_read.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
D16="-p 0 -n 2 -d 16384 -r 1"
FERROLM_CUDA_GRAPH=0 timeout 150 $NCU -k regex:attn_decode --launch-skip 32 --launch-count 2 \
  $B bench -m $F --backend cuda $D16 > $OUT/olmoe-attn16k.txt 2>&1
timeout 200 $NCU -k regex:flash_attn_ext_vec --launch-skip 40 --launch-count 1 \
  $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 2 -r 1 -d 16384 > $OUT/llama-attn16k.txt 2>&1
for f in olmoe-attn16k llama-attn16k; do
  echo "== $f"
  grep -E '^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|dram__bytes_read|Registers Per|Achieved Occ|Dynamic Shared|Grid Size|Block Size|Waves Per' $OUT/$f.txt | head -40
done
echo "end at $(( $(date +%s) - t0 )) s"
