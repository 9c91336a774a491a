#!/bin/bash
# Session 42's first call (writes under $OUT): cuda-parity (its "three super-blocks in flight"
# and "two matrices in one launch" rows: the f16 decode GEMM's bits); qwen3-8b's logits over 60
# steps one token a step with the decode switches on and off (the single-sequence path: equal
# md5s); qwen3-8b's batched S_TG at 16 / 32 / 64 sequences beside llama-batched-bench under
# the default, FERROLM_F16_DECODE_DEEP=1, FERROLM_F16_DECODE_PAIR=1, both,
# FERROLM_F16_MATVEC_OCCUPANCY=1, all three, and the default again; then, while under 420 s,
# OLMoE and qwen3-30b-a3b at 8 / 32 / 64 and tg128 of the three presets beside llama.cpp.
# Pooled synth files. Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [SEED=182] [PARITY=0] bash tools/device/s42_first.sh
source tools/device/carried.sh
pooled qwen3-8b olmoe-1b-7b qwen3-30b-a3b
DEEP=FERROLM_F16_DECODE_DEEP=1 PAIR=FERROLM_F16_DECODE_PAIR=1 OCC=FERROLM_F16_MATVEC_OCCUPANCY=1
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-182}
  for rows in "three super-blocks in flight" "two matrices in one launch"; do
    echo "'$rows' rows: $(grep -c "$rows" $OUT/parity.txt), passing: $(grep "$rows" $OUT/parity.txt | grep -c '| PASS |')"
  done
  echo "logits qwen3-8b default $(logits_md5 $M/qwen3-8b-pooled.gguf A=0) all three $(logits_md5 $M/qwen3-8b-pooled.gguf $DEEP $PAIR $OCC)"
fi
F=$M/qwen3-8b-pooled.gguf
echo "== qwen3-8b llama-batched-bench at $(( $(date +%s) - t0 )) s"
timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 |
  grep -E '^\|' | tail -3
for v in A=0 $DEEP $PAIR "$DEEP $PAIR" $OCC "$DEEP $PAIR $OCC" A=0; do
  echo "== $v at $(( $(date +%s) - t0 )) s"
  env $v timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 |
    grep -E '^\| +[0-9]|rror|panic'
done
for p in olmoe-1b-7b qwen3-30b-a3b; do
  [ $(( $(date +%s) - t0 )) -lt 420 ] || break
  F=$M/$p-pooled.gguf
  echo "== $p llama-batched-bench / ferrolm at $(( $(date +%s) - t0 )) s"
  timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 |
    grep -E '^\|' | tail -3
  timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 |
    grep -E '^\| +[0-9]|rror|panic'
done
for run in "qwen3-30b-a3b" "olmoe-1b-7b" "qwen3-8b" "olmoe-1b-7b -d 16384"; do
  [ $(( $(date +%s) - t0 )) -lt 480 ] || break
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run tg128 llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
done
echo "end at $(( $(date +%s) - t0 )) s"
