#!/bin/bash
# Session 41's first call (writes under $OUT): cuda-parity (its "outputs a share a block",
# "weights through shared memory", "shares added in a cluster" and "q, k and v in one launch"
# rows: the same bits);
# OLMoE's and qwen3-30b-a3b's logits over 60 steps one token a step with and without
# FERROLM_ROUTE_SPREAD_OUT=1 (md5s equal: the same bits); qwen3-8b's batched S_TG at 16 / 32 /
# 64 sequences beside llama-batched-bench under the default, FERROLM_F16_MATVEC_Q4K_STAGE=1,
# FERROLM_F16_MATVEC_CLUSTER=1, FERROLM_F16_MATVEC_ONE=1, the last two together, and the
# default again; while under 450 s, tg128 of
# qwen3-30b-a3b and OLMoE with and without the spread beside llama-bench. Pooled synth files. Usage, from
# the repo root, .device-carry/ from tools/device/pack.sh:
#   [SEED=181] [PARITY=0] bash tools/device/s41_first.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-181}
  for rows in "outputs a share a block" "weights through shared memory" "shares added in a cluster" \
    "q, k and v in one launch"; do
    echo "'$rows' rows: $(grep -c "$rows" $OUT/parity.txt), passing: $(grep "$rows" $OUT/parity.txt | grep -c '| PASS |')"
  done
  for p in olmoe-1b-7b qwen3-30b-a3b; do
    for v in A=0 FERROLM_ROUTE_SPREAD_OUT=1; do
      echo "logits $p $v $(logits_md5 $M/$p-pooled.gguf $v)"
    done
  done
fi
F=$M/qwen3-8b-pooled.gguf
echo "== llama-batched-bench at $(( $(date +%s) - t0 )) s"
timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 |
  grep -E '^\|' | tail -3
for v in A=0 FERROLM_F16_MATVEC_Q4K_STAGE=1 FERROLM_F16_MATVEC_CLUSTER=1 FERROLM_F16_MATVEC_ONE=1 \
  "FERROLM_F16_MATVEC_CLUSTER=1 FERROLM_F16_MATVEC_ONE=1" A=0; do
  echo "== $v at $(( $(date +%s) - t0 )) s"
  env $v timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 |
    grep -E '^\| +[0-9]|rror|panic'
done
# What time is left: tg128 beside llama-bench, default and with the spread (first the model
# whose bar is furthest).
for p in qwen3-30b-a3b olmoe-1b-7b; do
  [ $(( $(date +%s) - t0 )) -lt 450 ] || break
  F=$M/$p-pooled.gguf EXTRA=
  echo "== $p tg128 llama-bench $(llama_tg128) ferrolm $(tg128 A=0) spread $(tg128 FERROLM_ROUTE_SPREAD_OUT=1) / $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
done
echo "end at $(( $(date +%s) - t0 )) s"
