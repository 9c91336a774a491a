#!/bin/bash
# Session 38's bars with its defaults (FERROLM_MOE_DOWN_EARLY on, FERROLM_MOE_TIGHT=2), beside
# llama-bench: the MoE presets with the tight gate/up (TIGHT=3), without the tight entries
# (TIGHT=0), OLMoE at -d 16384; qwen3-8b at depth 0 and 16384; all three with the mat-vecs'
# weights asked for before the wait (FERROLM_CUDA_PREFETCH, to L2; _L1, to L1); the logits
# one token a step with TIGHT=3 and PREFETCH_L1 against the default's. Usage, from the repo
# root, .device-carry/ holding ferrolm.xz and llama.tar.xz: bash tools/device/s38_bars.sh
PRESETS="olmoe-1b-7b qwen3-30b-a3b" DEPTH_PRESETS=olmoe-1b-7b \
  SWITCHES="FERROLM_MOE_TIGHT=3 FERROLM_MOE_TIGHT=0 FERROLM_CUDA_PREFETCH=1 FERROLM_CUDA_PREFETCH_L1=1" \
  bash tools/device/s38_sweep.sh
PRESETS=qwen3-8b DEPTH_PRESETS=qwen3-8b SWITCHES="FERROLM_CUDA_PREFETCH=1 FERROLM_CUDA_PREFETCH_L1=1" bash tools/device/s38_sweep.sh | grep -v NVIDIA
source tools/device/carried.sh > /dev/null
toks=$(seq -s ' ' 3 7 250)
for P in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf
  $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/a.json 2> /dev/null
  FERROLM_MOE_TIGHT=3 FERROLM_CUDA_PREFETCH_L1=1 $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/b.json 2> /dev/null
  echo -n "$P FERROLM_MOE_TIGHT=3 FERROLM_CUDA_PREFETCH_L1=1 / default: "; python3 $T/same_logits.py /tmp/b.json /tmp/a.json
done
