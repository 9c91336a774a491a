#!/bin/bash
# Session 45's first call: issue 15's bars with the current defaults beside llama-bench, and
# session 40's unmeasured FERROLM_CUDA_PREFETCH_MAX_MB (the weight prefetch before the wait for
# the one-token mat-vecs whose weights are at most N MB: 5 takes qwen3-30b-a3b's and OLMoE's
# attention, 16 qwen3-8b's q and o too). tg128 -r 2 of pooled Q4_K_M synth files; the default
# before and after the switches; then qwen3-8b and OLMoE at -d 16384; smollm2-1.7b last
# (SMOL=0 skips it). Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [SMOL=0] bash tools/device/s45_bars.sh
source tools/device/carried.sh
P5=FERROLM_CUDA_PREFETCH_MAX_MB=5; P16=FERROLM_CUDA_PREFETCH_MAX_MB=16
pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b
echo "synth done at $(( $(date +%s) - t0 )) s"
for P in qwen3-30b-a3b olmoe-1b-7b qwen3-8b; do
  F=$M/$P-pooled.gguf; EXTRA=
  echo "== $P llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) <=5MB $(tg128 $P5) / $(tg128 $P5) <=16MB $(tg128 $P16) default $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
done
for P in olmoe-1b-7b qwen3-8b; do
  F=$M/$P-pooled.gguf; EXTRA="-d 16384"
  echo "== $P d16384 llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) <=5MB $(tg128 $P5) at $(( $(date +%s) - t0 )) s"
done
if [ "${SMOL:-1}" = 1 ]; then
  pooled smollm2-1.7b
  F=$M/smollm2-1.7b-pooled.gguf; EXTRA=
  echo "== smollm2-1.7b llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) <=5MB $(tg128 $P5) at $(( $(date +%s) - t0 )) s"
fi
echo "end at $(( $(date +%s) - t0 )) s"
