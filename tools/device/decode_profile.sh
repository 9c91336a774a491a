#!/bin/bash
# Issue 15's single-sequence decode, one device call (writes under $OUT): olmoe-1b-7b and
# qwen3-30b-a3b tg128 beside llama-bench (the same pooled synth files as moe_step_check.sh),
# each model's decode token kernel by kernel (ncu, 8 tokens), and qwen3-8b's decode attention
# at 16,384 keys (the split and tensor-core kernels, one launch each). Usage, from the repo
# root, .device-carry/ holding ferrolm.xz and llama.tar.xz (see carried.sh):
# bash tools/device/decode_profile.sh
source tools/device/carried.sh
for P in qwen3-30b-a3b olmoe-1b-7b; do
  [ -s $M/$P.gguf ] || $B synth --preset $P --type q4_k_m --pooled -o $M/$P.gguf > /dev/null 2>&1
done
AB="FERROLM_ATTN_TC=1 FERROLM_ATTN_TC=0" timeout 300 bash $T/decode_bench.sh $(dirname $B) $L 0 olmoe-1b-7b qwen3-30b-a3b
echo "at $(( $(date +%s) - t0 )) s"
for P in qwen3-30b-a3b olmoe-1b-7b; do
  echo "== $P one decode token, kernel by kernel (us a token)"
  DIV=16 timeout 150 bash $T/profile.sh $B $M/$P.gguf $P-tg "-p 0 -n 8" | head -30
  echo "at $(( $(date +%s) - t0 )) s"
done
P=qwen3-8b
NCU="ncu --clock-control none --cache-control none"
for on in 1 0; do
  echo "== $P FERROLM_ATTN_TC=$on decode attention at 16384 keys"
  FERROLM_ATTN_TC=$on timeout 150 $NCU -k regex:attn_decode --launch-skip 40 --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    $B bench -m $M/$P.gguf --backend cuda -p 0 -n 2 -d 16384 -r 1 > $OUT/attn16k-tc$on.txt 2>&1
  grep -E "attn_decode|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occ|Grid Size|Block Size" $OUT/attn16k-tc$on.txt | head -30
done
echo "end at $(( $(date +%s) - t0 )) s"
