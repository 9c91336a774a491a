#!/bin/bash
# Session 33's changes, written without a device, in one call (writes under $OUT):
# - cuda-parity: every row, the new ones among them ("gate/up blocks of N warps", "f16 copy",
#   and session 32's "weights through shared memory"), Q4_K's one-load head under every Q4_K
#   mat-vec row;
# - tg128 of qwen3-30b-a3b and olmoe-1b-7b beside llama-bench, the MoE gate/up block at one
#   token 4 warps (the default) / 8 (as before) / 4;
# - qwen3-8b tg128 beside llama-bench (the head load on the dense Q4_K mat-vecs);
# - qwen3-8b at 16 / 32 / 64 sequences beside llama-batched-bench: the default (f16 copies on),
#   FERROLM_F16_COPY=0, FERROLM_F16_MATVEC_Q6K_STAGE=1, the default.
# Pooled synth files. Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
# [PARITY=0] [TG=0] [BATCHED=0] [SEED=n] bash tools/device/s33_check.sh (each =0 skips its part)
source tools/device/carried.sh
pooled qwen3-8b olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-153}
  for r in 'warps' 'f16 copy' 'weights through shared memory'; do
    echo "rows '$r': $(grep -c "$r" $OUT/parity.txt), passing: $(grep "$r" $OUT/parity.txt | grep -c '| PASS |')"
  done
fi
if [ "${TG:-1}" = 1 ]; then
tg() { timeout 90 $B bench -m $1 --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in qwen3-30b-a3b olmoe-1b-7b qwen3-8b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  if [ $P = qwen3-8b ]; then
    echo "== $P ferrolm: $(tg $F) / $(tg $F)"
  else
    echo "== $P ferrolm, gate/up warps 4 / 8 / 4: $(tg $F) / $(FERROLM_MOE_GATE_UP_WARPS=8 tg $F) / $(tg $F)"
  fi
done
fi
if [ "${BATCHED:-1}" = 1 ]; then
F=$M/qwen3-8b-pooled.gguf
echo "== qwen3-8b llama-batched-bench"
timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\|' | tail -3
bb() { timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'; }
echo "== default"; bb
echo "== FERROLM_F16_COPY=0"; FERROLM_F16_COPY=0 bb
echo "== FERROLM_F16_MATVEC_Q6K_STAGE=1"; FERROLM_F16_MATVEC_Q6K_STAGE=1 bb
echo "== default"; bb
fi
echo "end at $(( $(date +%s) - t0 )) s"
