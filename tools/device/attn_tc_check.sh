#!/bin/bash
# Decode by KV group on the tensor cores (session 28, FERROLM_ATTN_TC, off by default until this
# runs), one device call (writes under $OUT): qwen3-8b (4 query heads a KV head) tg128 at depth
# 0 and 16384 beside llama-bench, the kernels on and off alternated (issue 15's -d 16384 bar),
# then qwen3-30b-a3b (8 a group) at 8 sequences beside llama-batched-bench. Run after
# moe_step_check.sh on the same warm machine (its cuda-parity has the tensor-core rows and its
# qwen3-30b-a3b file), or with PARITY=1. Usage, from the repo root, .device-carry/ holding
# ferrolm.xz and llama.tar.xz (see carried.sh): bash tools/device/attn_tc_check.sh
source tools/device/carried.sh
if [ -n "$PARITY" ]; then
  timeout 200 $B cuda-parity --seed 109 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
  echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
  grep "tensor cores" $OUT/parity.txt | cut -c1-160 | head -20
fi
AB="FERROLM_ATTN_TC=1 FERROLM_ATTN_TC=0" timeout 420 bash $T/decode_bench.sh $(dirname $B) $L 0,16384 qwen3-8b
echo "at $(( $(date +%s) - t0 )) s"
P=qwen3-30b-a3b
[ -s $M/$P.gguf ] || $B synth --preset $P --type q4_k_m --pooled -o $M/$P.gguf > /dev/null 2>&1
echo "== $P llama-batched-bench -npl 8"
timeout 100 $L/llama-batched-bench -m $M/$P.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 8 2>&1 | grep -E '^\|' | tail -1
for setting in FERROLM_ATTN_TC=1 FERROLM_ATTN_TC=0; do
  echo "== $P ferrolm $setting -npl 8"
  env $setting timeout 60 $B bench -m $M/$P.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8 2>&1 | grep -E '^\| +[0-9]|rror'
done
echo "end at $(( $(date +%s) - t0 )) s"
