#!/bin/bash
# Session 45's last call, trimmed to the device time left (the switch was taken out after it,
# level: docs/perf.md session 45): FERROLM_CUDA_GRAPH_PINNED_INPUTS=1
# against the default (OLMoE's logits one token a step either way; tg128 of olmoe-1b-7b,
# qwen3-30b-a3b and OLMoE at -d 16384, default / pinned / default / pinned, beside llama-bench;
# OLMoE's step with no kernels either way). Usage: bash tools/device/s45_last.sh
source tools/device/carried.sh
PIN=FERROLM_CUDA_GRAPH_PINNED_INPUTS=1
pooled olmoe-1b-7b qwen3-30b-a3b
echo "logits olmoe default $(logits_md5 $M/olmoe-1b-7b-pooled.gguf A=0) pinned $(logits_md5 $M/olmoe-1b-7b-pooled.gguf $PIN)"
for run in "olmoe-1b-7b" "qwen3-30b-a3b" "olmoe-1b-7b -d 16384"; do
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run llama-bench $(llama_tg128) ferrolm $(tg128 A=0) pinned $(tg128 $PIN) ferrolm $(tg128 A=0) pinned $(tg128 $PIN) at $(( $(date +%s) - t0 )) s"
done
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA=
ALL=FERROLM_TIMING_SKIP=$(echo {a..z} | tr ' ' ',')
echo "== olmoe no kernels $(tg128 $ALL) / pinned $(tg128 $ALL $PIN) at $(( $(date +%s) - t0 )) s"
