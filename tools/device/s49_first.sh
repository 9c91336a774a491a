#!/bin/bash
# Session 49: FERROLM_L2_AHEAD (1: prefetch.global.L2 a line a request; 2: 4 KB bulk
# requests): a kernel on a stream of its own beside a captured one-token step asks L2 for layer
# l + 1's attention weights and router once layer l's router launch has started. The same bits
# expected. In order: both MoE models' logits over 60 steps one token a step under each (one
# md5 a model); tg128 beside llama-bench, ROUNDS rounds of default / lines / bulk on
# qwen3-30b-a3b, then on OLMoE; with DEPTH=1 OLMoE at -d 16384; then cuda-parity. About 400 s.
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [PARITY=0] [DEPTH=1] [ROUNDS=2] bash tools/device/s49_first.sh
source tools/device/carried.sh
A=FERROLM_L2_AHEAD
pooled qwen3-30b-a3b olmoe-1b-7b
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf
  echo "logits $p 0 $(logits_md5 $F A=0) lines $(logits_md5 $F $A=1) bulk $(logits_md5 $F $A=2) at $(( $(date +%s) - t0 )) s"
done
EXTRA=
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf
  echo "== $p llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  tg_rounds ${ROUNDS:-2} 0=A=0 lines=$A=1 bulk=$A=2
done
[ "${DEPTH:-0}" = 0 ] || {
  EXTRA="-d 16384"
  echo "== olmoe-1b-7b -d 16384 llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  tg_rounds 1 0=A=0 lines=$A=1 bulk=$A=2
}
[ "${PARITY:-1}" = 0 ] || run_parity 201
echo "end at $(( $(date +%s) - t0 )) s"
