#!/bin/bash
# Issue 16's batched MoE steps in one device call (not yet run: session 27's router mat-vec a
# warp a token; session 28's batched attention on the KV-group block, the staged mat-vec's and
# the tensor-core attention's parity rows): cuda-parity (the routing rows at 5 and 8 tokens,
# attn_decode_rows at every group size, mmvq_staged against mmq and the CPU, the tensor-core
# decode rows), then batched decode of qwen3-30b-a3b and olmoe-1b-7b beside llama.cpp's
# llama-batched-bench in the same call, then the batched attention's keys a split on
# qwen3-30b-a3b. Usage, from the repo root, with .device-carry/ holding ferrolm.xz (the
# stripped release binary, xz-compressed) and llama.tar.xz (../shared/bench's archive):
# bash tools/device/moe_step_check.sh
source tools/device/carried.sh
( for P in qwen3-30b-a3b olmoe-1b-7b; do
    [ -s $M/$P.gguf ] || $B synth --preset $P --type q4_k_m --pooled -o $M/$P.gguf > /dev/null 2>&1
  done ) &
SP=$!
timeout 220 $B cuda-parity --seed 103 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt) at $(( $(date +%s) - t0 )) s"
echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
grep -E "moe route logits|moe_route_small|mmvq_staged|attn_decode_rows \(a row|tensor cores" $OUT/parity.txt | cut -c1-150 | head -60
wait $SP
for P in qwen3-30b-a3b olmoe-1b-7b; do
  echo "== $P llama-batched-bench, ferrolm bench"
  timeout 150 $L/llama-batched-bench -m $M/$P.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\|' | tail -3
  timeout 100 $B bench -m $M/$P.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\| +[0-9]|rror'
  echo "at $(( $(date +%s) - t0 )) s"
done
P=qwen3-30b-a3b
for keys in 64 128; do
  echo "== $P FERROLM_ROWS_SPLIT_KEYS=$keys -npl 8"
  timeout 60 env FERROLM_ROWS_SPLIT_KEYS=$keys $B bench -m $M/$P.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8 2>&1 | grep -E '^\| +[0-9]|rror'
done
echo "end at $(( $(date +%s) - t0 )) s"
