#!/bin/bash
# Session 45: issue 15's whole table on whatever card the call gets (its name is the first line
# printed), with the session's defaults, then the probe (tools/device/s45_probe.sh: the step
# with no kernels, the output head under ncu) where PROBE=1 (default). tg128 -r 2 of pooled
# Q4_K_M synth files beside llama-bench in the same call; qwen3-8b and OLMoE at -d 16384 too.
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh: [PROBE=0] bash tools/device/s45_all.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b smollm2-1.7b
echo "synth done at $(( $(date +%s) - t0 )) s"
for run in "qwen3-30b-a3b" "olmoe-1b-7b" "qwen3-8b" "smollm2-1.7b" "olmoe-1b-7b -d 16384" "qwen3-8b -d 16384"; do
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
done
[ "${PROBE:-1}" = 1 ] && bash tools/device/s45_probe.sh | grep -v '^NVIDIA'
echo "end at $(( $(date +%s) - t0 )) s"
