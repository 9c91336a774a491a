#!/bin/bash
# Session 35's call (writes under $OUT): cuda-parity (the rows "h quantized in gate/up", "norm
# in the q/k/v launch" and "norm in the gate/up launch"); FERROLM_NORM_IN_QKV's and _GLU's same
# logits (tools/device/switch_same.sh) on the one shape-space model whose width the kernels take
# (llama-d512, Q4_K_M and Q8_0; needs goldens/shape-space carried); tg128 beside llama-bench with
# FERROLM_MOE_H_IN_GATE_UP and FERROLM_NORM_IN_QKV off and on (qwen3-30b-a3b, olmoe-1b-7b;
# qwen3-8b with FERROLM_NORM_IN_GLU for the first), each variant twice, interleaved; then
# qwen3-8b's chain at 64 sequences (tools/device/chain_q8b.sh BATCH_ONLY=1). Pooled synth
# files. Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
# [PARITY=0] [SAME=0] [CHAIN=0] [PRESETS="..."] [SEED=n] bash tools/device/s35_check.sh
source tools/device/carried.sh
PRESETS=${PRESETS:-"qwen3-30b-a3b olmoe-1b-7b qwen3-8b"}
pooled $PRESETS
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-161}
  for r in 'h quantized in gate/up' 'norm in the q/k/v launch' 'norm in the gate/up launch'; do
    echo "rows '$r': $(grep -c "$r" $OUT/parity.txt), passing: $(grep "$r" $OUT/parity.txt | grep -c '| PASS |')"
  done
fi
if [ "${SAME:-1}" = 1 ]; then
  R=goldens/shape-space/llama-d512-h64-gqa4-r5e5.recipe.json; mkdir -p /tmp/rs
  for ty in q4_k_m q8_0; do $B synth --recipe $R --type $ty -o /tmp/rs/d512-$ty.gguf > /dev/null 2>&1; done
  bash $T/switch_same.sh $B /tmp/rs "FERROLM_NORM_IN_QKV=1 FERROLM_NORM_IN_GLU=1" "A=0" d512-q4_k_m d512-q8_0
fi
tg() { timeout 90 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
H=FERROLM_MOE_H_IN_GATE_UP=1; N=FERROLM_NORM_IN_QKV=1; G=FERROLM_NORM_IN_GLU=1
for P in $PRESETS; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  for round in 1 2; do
    case $P in
      qwen3-8b|smollm2-1.7b) echo "== $P ferrolm round $round, default / norm in qkv / norm in glu / both: $(tg A=0) / $(tg $N) / $(tg $G) / $(tg $N $G)" ;;
      *) echo "== $P ferrolm round $round, default / h in gate/up / norm in qkv / both: $(tg A=0) / $(tg $H) / $(tg $N) / $(tg $H $N)" ;;
    esac
  done
done
[ "${CHAIN:-1}" = 1 ] && BATCH_ONLY=1 bash tools/device/chain_q8b.sh 2>&1 | grep -v '^NVIDIA'
echo "end at $(( $(date +%s) - t0 )) s"
