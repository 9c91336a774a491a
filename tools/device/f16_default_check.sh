#!/bin/bash
# The f16 mat-vec's default (session 30: on, from 17 rows at 4096 columns and more, 33 below),
# one device call (writes under $OUT): qwen3-8b batched decode at 16 / 32 / 64 sequences beside
# llama-batched-bench, the default, FERROLM_F16_DECODE_FIRST=1 (gate and up on the f16 decode
# GEMM), FERROLM_CUDA_CARVEOUT=100 (one carveout for every kernel) and FERROLM_F16_MATVEC=0;
# qwen3-8b tg128 under FERROLM_CUDA_CARVEOUT=auto / 100, alternated; qwen3-30b-a3b at 8 / 32 / 64
# the default and =0 (its dense products change at 64 sequences). Pooled synth files (seconds to
# write). Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
# bash tools/device/f16_default_check.sh
source tools/device/carried.sh
pooled qwen3-8b qwen3-30b-a3b
echo "models at $(( $(date +%s) - t0 )) s"
P=$M/qwen3-8b-pooled.gguf
echo "== qwen3-8b llama-batched-bench"
timeout 90 $L/llama-batched-bench -m $P -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\|' | tail -3
for s in FERROLM_F16_MATVEC=1 FERROLM_F16_DECODE_FIRST=1 FERROLM_CUDA_CARVEOUT=100 FERROLM_F16_MATVEC=0; do
  echo "== qwen3-8b ferrolm $s at $(( $(date +%s) - t0 )) s"
  env $s timeout 60 $B bench -m $P --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
done
for s in FERROLM_CUDA_CARVEOUT=auto FERROLM_CUDA_CARVEOUT=100 FERROLM_CUDA_CARVEOUT=auto FERROLM_CUDA_CARVEOUT=100; do
  echo "== qwen3-8b tg128 $s: $(env $s timeout 60 $B bench -m $P --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic')"
done
P=$M/qwen3-30b-a3b-pooled.gguf
for s in FERROLM_F16_MATVEC=1 FERROLM_F16_MATVEC=0; do
  echo "== qwen3-30b-a3b ferrolm $s at $(( $(date +%s) - t0 )) s"
  env $s timeout 60 $B bench -m $P --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
done
echo "end at $(( $(date +%s) - t0 )) s"
