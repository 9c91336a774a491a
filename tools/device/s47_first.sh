#!/bin/bash
# (Run in session 47; FERROLM_ROUTE_TOPK_LATE was taken out after it: docs/perf.md, session 47.)
# Session 47: FERROLM_ROUTE_TOPK_LATE (one token's top-k taken by the fused expert launches
# from the router's logits, the residual written back by down: the router's count, its last
# block's reload, top-k and write-back off the layer's chain). In order: both MoE models'
# logits over 60 steps one token a step with and without it (the same md5 expected: the same
# bits); tg128 beside llama-bench, default / late twice, qwen3-30b-a3b then OLMoE; OLMoE at
# -d 16384; what the router launch costs the chain either way (FERROLM_TIMING_SKIP); then
# cuda-parity (its "route late" rows). Usage, from the repo root, .device-carry/ from
# tools/device/pack.sh:
#   [PARITY=0] bash tools/device/s47_first.sh
source tools/device/carried.sh
LATE=FERROLM_ROUTE_TOPK_LATE=1
pooled qwen3-30b-a3b olmoe-1b-7b
for p in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$p-pooled.gguf
  echo "logits $p default $(logits_md5 $F A=0) late $(logits_md5 $F $LATE) at $(( $(date +%s) - t0 )) s"
done
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf; EXTRA=
  echo "== $p llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  for r in 1 2; do
    echo "  default $(tg128 A=0) | late $(tg128 $LATE) at $(( $(date +%s) - t0 )) s"
  done
done
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA="-d 16384"
echo "== olmoe-1b-7b -d 16384 llama-bench $(llama_tg128) | default $(tg128 A=0) | late $(tg128 $LATE) at $(( $(date +%s) - t0 )) s"
F=$M/qwen3-30b-a3b-pooled.gguf; EXTRA=
S=FERROLM_TIMING_SKIP=add_rms_norm_route_small
echo "== qwen3-30b-a3b chain: no router $(tg128 $S) | late, no router $(tg128 $LATE $S) at $(( $(date +%s) - t0 )) s"
[ "${PARITY:-1}" = 0 ] || run_parity 191
echo "end at $(( $(date +%s) - t0 )) s"
