#!/bin/bash
# (Run in session 46; both switches were taken out after it: docs/perf.md, session 46.)
# Session 46: what the router launch asks L2 for on later launches' behalf.
# FERROLM_ROUTE_PREFETCH_NEXT (the next layer's attention weights, after its wait, while its
# own short chain leaves DRAM idle; 1 normal priority, 2 evict_last) and
# FERROLM_ROUTE_PREFETCH_EXPERTS (its last block asks for the chosen experts right after the
# top-k: bit 1 gate and up, bit 2 down). In order: qwen3-30b-a3b's tg128 beside llama-bench;
# both MoE models' logits over 60 steps one token a step under each (the same md5 expected:
# they ask, read nothing); OLMoE's tg128; OLMoE at -d 16384; then cuda-parity (its
# norm-route rows include the launch asking L2). Usage, from the repo root, .device-carry/
# from tools/device/pack.sh:
#   [PARITY=0] bash tools/device/s46_next.sh
source tools/device/carried.sh
N=FERROLM_ROUTE_PREFETCH_NEXT; X=FERROLM_ROUTE_PREFETCH_EXPERTS
pooled qwen3-30b-a3b olmoe-1b-7b
tg_rows() {
  echo "== $1 llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  for r in 1 2; do
    echo "  0 $(tg128 A=0) | next=1 $(tg128 $N=1) | next=2 $(tg128 $N=2) | experts=2 $(tg128 $X=2) | experts=3 $(tg128 $X=3) at $(( $(date +%s) - t0 )) s"
  done
}
F=$M/qwen3-30b-a3b-pooled.gguf; EXTRA=; tg_rows qwen3-30b-a3b
for p in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$p-pooled.gguf
  echo "logits $p default $(logits_md5 $F A=0) next=2 $(logits_md5 $F $N=2) experts=3 $(logits_md5 $F $X=3) at $(( $(date +%s) - t0 )) s"
done
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA=; tg_rows olmoe-1b-7b
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA="-d 16384"
echo "== olmoe-1b-7b -d 16384 llama-bench $(llama_tg128) | 0 $(tg128 A=0) | next=1 $(tg128 $N=1) | experts=3 $(tg128 $X=3) at $(( $(date +%s) - t0 )) s"
[ "${PARITY:-1}" = 0 ] || run_parity 187
echo "end at $(( $(date +%s) - t0 )) s"
