#!/bin/bash
# One device call that checks a build against llama.cpp where issue 15's and 16's bars stand
# (writes under $OUT): cuda-parity, tg128 of qwen3-8b, olmoe-1b-7b and qwen3-30b-a3b (qwen3-8b
# at 16,384 keys too) beside llama-bench, and qwen3-8b at 64 sequences beside
# llama-batched-bench. Pooled synth files. Usage, from the repo root, .device-carry/ from
# tools/device/pack.sh: [PARITY=0] [SEED=n] bash tools/device/session_check.sh
source tools/device/carried.sh
pooled qwen3-8b olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-147}
fi
tg() { timeout 90 $B bench -m $1 --backend cuda -p 0 -n 128 -r 2 ${2:+-d $2} 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in qwen3-30b-a3b olmoe-1b-7b qwen3-8b; do
  F=$M/$P-pooled.gguf
  for d in 0 16384; do
    [ $P != qwen3-8b ] && [ $d != 0 ] && continue
    echo "== $P d$d llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -d $d -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
    echo "== $P d$d ferrolm: $(tg $F $d) / $(tg $F $d)"
  done
done
F=$M/qwen3-8b-pooled.gguf
echo "== qwen3-8b B=64 llama-batched-bench"
timeout 90 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 64 2>&1 | grep -E '^\|' | tail -1
echo "== qwen3-8b B=64 ferrolm"
timeout 60 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
echo "end at $(( $(date +%s) - t0 )) s"
