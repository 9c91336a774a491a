#!/bin/bash
# Session 45's last call as planned (no machine came for it: tools/device/s45_last.sh ran
# instead; FERROLM_CUDA_GRAPH_PINNED_INPUTS was taken out after it): issue 15's table with
# the session's defaults beside llama-bench
# (every preset on an H200; on an H100 the MoE presets and OLMoE at -d 16384 only), each with
# FERROLM_CUDA_GRAPH_PINNED_INPUTS=1 too (the decode graph copies its token and position in
# from page-locked memory: no copy calls ahead of a replay), the logits one token a step with
# and without it (md5s equal: the same bits), then the probe (tools/device/s45_probe.sh: the
# step with no kernels, with and without the switch; the output head under ncu).
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh: bash tools/device/s45_final.sh
source tools/device/carried.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
PIN=FERROLM_CUDA_GRAPH_PINNED_INPUTS=1
if [[ $GPU == *H200* ]]; then
  RUNS=("qwen3-30b-a3b" "olmoe-1b-7b" "olmoe-1b-7b -d 16384" "qwen3-8b" "smollm2-1.7b" "qwen3-8b -d 16384")
  pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b smollm2-1.7b
else
  RUNS=("qwen3-30b-a3b" "olmoe-1b-7b" "olmoe-1b-7b -d 16384")
  pooled olmoe-1b-7b qwen3-30b-a3b
fi
echo "synth done at $(( $(date +%s) - t0 )) s"
for p in olmoe-1b-7b qwen3-30b-a3b; do
  echo "logits $p default $(logits_md5 $M/$p-pooled.gguf A=0) pinned $(logits_md5 $M/$p-pooled.gguf $PIN)"
done
for run in "${RUNS[@]}"; do
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) pinned $(tg128 $PIN) / $(tg128 $PIN) at $(( $(date +%s) - t0 )) s"
done
ALL=FERROLM_TIMING_SKIP=$(echo {a..z} | tr ' ' ',')
for P in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf; EXTRA=
  echo "== $P no kernels $(tg128 $ALL) / pinned $(tg128 $ALL $PIN) at $(( $(date +%s) - t0 )) s"
done
[ "${NCU:-1}" = 1 ] && STEP=0 bash tools/device/s45_probe.sh | grep -v '^NVIDIA'
echo "end at $(( $(date +%s) - t0 )) s"
