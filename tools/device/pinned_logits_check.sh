#!/bin/bash
# Issue 16: a pass's logits through a kept page-locked buffer (session 24; FERROLM_PINNED_LOGITS=1,
# off by default until this runs), one device call
# (writes under $OUT): the switch's contract (`FERROLM_PINNED_LOGITS=0` the same bytes through
# the CLI, on golden files copied into .device-carry/g), the `to_host` stage of a 64-sequence
# qwen3-8b step with and without it, then llama-batched-bench beside `ferrolm bench`'s batched
# mode both ways (f16_decode_check.sh's benches), and one sequence's tg128.
# Usage, from the repo root, .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   bash tools/device/pinned_logits_check.sh
D=.device-carry; T=tools/device; M=target/device-models; BD=target/dev-bin
export FERROLM_CACHE=/tmp/ferrolm-cache
mkdir -p $BD && xz -d -c $D/ferrolm.xz > $BD/ferrolm && chmod +x $BD/ferrolm
B=$BD/ferrolm
if [ -d $D/g ]; then
  echo "== switch contract"
  bash $T/switch_same.sh $B $D/g "FERROLM_PINNED_LOGITS=1" "FERROLM_PINNED_LOGITS=0" \
    $(ls $D/g | sed -n 's/\.gguf$//p')
fi
mkdir -p $M
[ -s $M/qwen3-8b.gguf ] || $B synth --preset qwen3-8b --type q4_k_m -o $M/qwen3-8b.gguf > $OUT/synth-q.txt 2>&1
for setting in FERROLM_PINNED_LOGITS=1 FERROLM_PINNED_LOGITS=0; do
  echo "== qwen3-8b stages, 64 sequences, $setting"
  env $setting FERROLM_CUDA_PROFILE=1 timeout 120 $B bench -m $M/qwen3-8b.gguf --backend cuda \
    -c 4096 -npp 16 -ntg 16 -npl 64 2>&1 | grep -E 'to_host|matmul|gate_up|wall|^\|' | head -20
done
# The unpacked binary is reused: f16_decode_check.sh unpacks the same file again.
SKIP_PARITY=1 EXTRA="FERROLM_PINNED_LOGITS=1" NPL=${NPL:-1,16,32,64} bash $T/f16_decode_check.sh
for setting in FERROLM_PINNED_LOGITS=1 FERROLM_PINNED_LOGITS=0; do
  echo "== qwen3-8b tg128, $setting"
  env $setting timeout 120 $B bench -m $M/qwen3-8b.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 | grep -E '^\|'
done
echo done
