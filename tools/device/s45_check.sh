#!/bin/bash
# Session 45's second call (FERROLM_MOE_H_IN_DOWN was taken out after it: -19%, docs/perf.md
# session 45): FERROLM_MOE_H_IN_DOWN (one token's tight MoE down quantizes h
# itself, in place of quantize_q8_k's launch) and the weight prefetch's new default (mat-vecs
# of at most 5 MB; FERROLM_CUDA_PREFETCH_MAX_MB=0 turns it off). In order: cuda-parity (the
# "h quantized in the tight down" rows); the MoE models' logits over 60 steps one token a step
# with and without H_IN_DOWN and without the prefetch (md5s equal: the same bits); tg128 of
# qwen3-30b-a3b and olmoe-1b-7b beside llama-bench, default / H_IN_DOWN / default / H_IN_DOWN,
# then OLMoE at -d 16384; with BATCHED=1 (default), the MoE models' S_TG at 8 / 32 / 64 with
# the prefetch off and on beside llama-batched-bench (issue 16's bars). Pooled synth files.
# Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [SEED=186] [PARITY=0] [BATCHED=0] bash tools/device/s45_check.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-186}
  rows="h quantized in the tight down"
  echo "'$rows' rows: $(grep -c "$rows" $OUT/parity.txt), passing: $(grep "$rows" $OUT/parity.txt | grep -c '| PASS |')"
fi
HD=FERROLM_MOE_H_IN_DOWN=1; NOPF=FERROLM_CUDA_PREFETCH_MAX_MB=0
for p in olmoe-1b-7b qwen3-30b-a3b; do
  echo "logits $p default $(logits_md5 $M/$p-pooled.gguf A=0) h-in-down $(logits_md5 $M/$p-pooled.gguf $HD) no-prefetch $(logits_md5 $M/$p-pooled.gguf $NOPF)"
done
for run in "qwen3-30b-a3b" "olmoe-1b-7b"; do
  F=$M/$run-pooled.gguf; EXTRA=
  echo "== $run llama-bench $(llama_tg128) default $(tg128 A=0) h-in-down $(tg128 $HD) default $(tg128 A=0) h-in-down $(tg128 $HD) no-prefetch $(tg128 $NOPF) at $(( $(date +%s) - t0 )) s"
done
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA="-d 16384"
echo "== olmoe-1b-7b d16384 llama-bench $(llama_tg128) default $(tg128 A=0) h-in-down $(tg128 $HD) at $(( $(date +%s) - t0 )) s"
if [ "${BATCHED:-1}" = 1 ]; then
  for p in olmoe-1b-7b qwen3-30b-a3b; do
    F=$M/$p-pooled.gguf
    echo "== $p llama-batched-bench at $(( $(date +%s) - t0 )) s"
    timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\|' | tail -3
    for v in $NOPF A=0; do
      echo "== $p $v"
      env $v timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
    done
  done
fi
echo "end at $(( $(date +%s) - t0 )) s"
