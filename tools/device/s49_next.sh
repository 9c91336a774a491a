#!/bin/bash
# Session 49, after s49_first.sh found FERROLM_L2_AHEAD slower (-4 to -5% qwen3-30b-a3b, -2.5%
# OLMoE, H100): what the forked branch costs by itself (FERROLM_L2_AHEAD=3: its waits without
# requests) beside the requests (1), at 32 and at 4 blocks. tg128 beside llama-bench, ROUNDS
# rounds on qwen3-30b-a3b, then on OLMoE; the logits' md5 under the dry form first. About 200 s.
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [ROUNDS=2] bash tools/device/s49_next.sh
source tools/device/carried.sh
A=FERROLM_L2_AHEAD; N=FERROLM_L2_AHEAD_BLOCKS
pooled qwen3-30b-a3b olmoe-1b-7b
F=$M/olmoe-1b-7b-pooled.gguf
echo "logits olmoe-1b-7b 0 $(logits_md5 $F A=0) dry $(logits_md5 $F $A=3) at $(( $(date +%s) - t0 )) s"
EXTRA=
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf
  echo "== $p llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  tg_rounds ${ROUNDS:-2} 0=A=0 lines=$A=1 dry=$A=3 lines4="$A=1 $N=4" dry4="$A=3 $N=4"
done
echo "end at $(( $(date +%s) - t0 )) s"
