#!/bin/bash
# (Run in session 48 with ROUNDS=1: all four switches the same bits, none faster; they stay off,
# docs/perf.md, session 48.)
# Session 48: session 47's three router switches and
# FERROLM_MOE_PERSISTENT (one token's gate/up, h's quantization and down in one launch with a
# grid barrier; taken where the grid is resident whole: 3 blocks an SM for qwen3-30b-a3b, 4 for
# OLMoE), each the same bits. In order: both MoE models' logits over 60 steps one token a step under each (the same
# md5 expected); tg128 beside llama-bench, ROUNDS rounds of default / persistent / exact / P=4 /
# P=8 / release on qwen3-30b-a3b, then one round on OLMoE; with DEPTH=1 OLMoE at
# -d 16384; then cuda-parity (the "moe persistent" rows, and the router's "exact rows",
# "experts a block" and "acq_rel" norm-route rows). About 450 s. Usage, from the repo root,
# .device-carry/ from tools/device/pack.sh:
#   [PARITY=0] [DEPTH=1] [ROUNDS=2] bash tools/device/s48_first.sh
source tools/device/carried.sh
PERS=FERROLM_MOE_PERSISTENT=1 X=FERROLM_ROUTE_EXACT=1 P=FERROLM_ROUTE_EXPERTS_A_BLOCK
Q=FERROLM_ROUTE_RELEASE=1
pooled qwen3-30b-a3b olmoe-1b-7b
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf
  echo "logits $p 0 $(logits_md5 $F A=0) persistent $(logits_md5 $F $PERS) exact $(logits_md5 $F $X) P=4 $(logits_md5 $F $P=4) P=8 $(logits_md5 $F $P=8) release $(logits_md5 $F $Q) at $(( $(date +%s) - t0 )) s"
done
F=$M/qwen3-30b-a3b-pooled.gguf; EXTRA=
echo "== qwen3-30b-a3b llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
tg_rounds ${ROUNDS:-2} 0=A=0 persistent=$PERS exact=$X P4=$P=4 P8=$P=8 release=$Q
F=$M/olmoe-1b-7b-pooled.gguf
echo "== olmoe-1b-7b llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
tg_rounds 1 0=A=0 persistent=$PERS exact=$X P4=$P=4 P8=$P=8 release=$Q
[ "${DEPTH:-0}" = 0 ] || {
  EXTRA="-d 16384"
  echo "== olmoe-1b-7b -d 16384 llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  tg_rounds 1 0=A=0 persistent=$PERS exact=$X P4=$P=4
}
[ "${PARITY:-1}" = 0 ] || run_parity 199
echo "end at $(( $(date +%s) - t0 )) s"
