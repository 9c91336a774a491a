#!/bin/bash
# What session 34 left unmeasured, in one call (writes under $OUT): cuda-parity (the row "h
# quantized in gate/up"), tg128 of qwen3-30b-a3b and olmoe-1b-7b beside llama-bench with
# FERROLM_MOE_H_IN_GATE_UP off / on / off / on, then qwen3-8b's chain at 64 sequences
# (tools/device/chain_q8b.sh BATCH_ONLY=1). Pooled synth files. Usage, from the repo root,
# .device-carry/ from tools/device/pack.sh: [PARITY=0] [CHAIN=0] [SEED=n] bash tools/device/s35_check.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-161}
  r='h quantized in gate/up'
  echo "rows '$r': $(grep -c "$r" $OUT/parity.txt), passing: $(grep "$r" $OUT/parity.txt | grep -c '| PASS |')"
fi
tg() { timeout 90 $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
on() { FERROLM_MOE_H_IN_GATE_UP=1 tg; }
for P in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  echo "== $P ferrolm, h in gate/up off / on / off / on: $(tg) / $(on) / $(tg) / $(on)"
done
[ "${CHAIN:-1}" = 1 ] && BATCH_ONLY=1 bash tools/device/chain_q8b.sh 2>&1 | grep -v '^NVIDIA'
echo "end at $(( $(date +%s) - t0 )) s"
