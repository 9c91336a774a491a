#!/bin/bash
# Session 47 (written; the session's device time ran out before it ran): three router launch
# changes, each the same bits. FERROLM_ROUTE_RELEASE (the blocks counted by one acquire-release
# atomic, without block_fence_count's fences), FERROLM_ROUTE_EXACT (one token's
# norm on rows of exactly 4 elements a thread, the writer's Q8_K blocks from shared memory) and
# FERROLM_ROUTE_EXPERTS_A_BLOCK=P (P experts a block: P times fewer blocks taking the norm,
# counting and reading the residual from L2). In order: both MoE models' logits over 60 steps
# one token a step under each (the same md5 expected); tg128 beside llama-bench, default /
# exact / P=4 / P=8 / release, twice, qwen3-30b-a3b then OLMoE; with DEPTH=1 OLMoE at -d 16384; then
# cuda-parity (its "exact rows", "experts a block" and "acq_rel" norm-route rows). Usage, from the repo
# root, .device-carry/ from tools/device/pack.sh:
#   [PARITY=0] [DEPTH=1] [ROUNDS=1] [MODELS=qwen3-30b-a3b] bash tools/device/s47_route.sh
source tools/device/carried.sh
X=FERROLM_ROUTE_EXACT=1; P=FERROLM_ROUTE_EXPERTS_A_BLOCK; Q=FERROLM_ROUTE_RELEASE=1
MODELS=${MODELS:-qwen3-30b-a3b olmoe-1b-7b}
pooled $MODELS
for p in $MODELS; do
  F=$M/$p-pooled.gguf
  echo "logits $p 0 $(logits_md5 $F A=0) exact $(logits_md5 $F $X) P=4 $(logits_md5 $F $P=4) P=8 $(logits_md5 $F $P=8) release $(logits_md5 $F $Q) at $(( $(date +%s) - t0 )) s"
done
for p in $MODELS; do
  F=$M/$p-pooled.gguf; EXTRA=
  echo "== $p llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  for r in $(seq ${ROUNDS:-2}); do
    echo "  0 $(tg128 A=0) | exact $(tg128 $X) | P=4 $(tg128 $P=4) | P=8 $(tg128 $P=8) | release $(tg128 $Q) at $(( $(date +%s) - t0 )) s"
  done
done
[ "${DEPTH:-0}" = 0 ] || {
  F=$M/olmoe-1b-7b-pooled.gguf; EXTRA="-d 16384"
  echo "== olmoe-1b-7b -d 16384 llama-bench $(llama_tg128) | 0 $(tg128 A=0) | exact $(tg128 $X) | P=4 $(tg128 $P=4) at $(( $(date +%s) - t0 )) s"
}
[ "${PARITY:-1}" = 0 ] || run_parity 197
echo "end at $(( $(date +%s) - t0 )) s"
