#!/bin/bash
# Session 46: FERROLM_ROUTE_PREFETCH_NEXT (the router launch asks L2 for the next layer's
# attention weights while its own short chain leaves DRAM idle; 1 normal priority, 2
# evict_last). In order: both MoE models' logits over 60 steps one token a step under 0 / 1 /
# 2 (the same md5 expected: it asks, reads nothing); tg128 beside llama-bench, 0 / 1 / 2 / 0 /
# 1 / 2; OLMoE at -d 16384 the same; then cuda-parity (its norm-route rows include the
# launch asking L2). Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [PARITY=0] bash tools/device/s46_next.sh
source tools/device/carried.sh
S=FERROLM_ROUTE_PREFETCH_NEXT
pooled qwen3-30b-a3b olmoe-1b-7b
for p in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$p-pooled.gguf
  echo "logits $p 0 $(logits_md5 $F $S=0) 1 $(logits_md5 $F $S=1) 2 $(logits_md5 $F $S=2)"
done
for run in "qwen3-30b-a3b" "olmoe-1b-7b" "olmoe-1b-7b -d 16384"; do
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run llama-bench $(llama_tg128) | 0 $(tg128 $S=0) | 1 $(tg128 $S=1) | 2 $(tg128 $S=2) | 0 $(tg128 $S=0) | 1 $(tg128 $S=1) | 2 $(tg128 $S=2) at $(( $(date +%s) - t0 )) s"
done
[ "${PARITY:-1}" = 0 ] || run_parity 187
echo "end at $(( $(date +%s) - t0 )) s"
