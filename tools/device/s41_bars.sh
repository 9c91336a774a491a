#!/bin/bash
# Session 41's bars call (writes under $OUT): issue 16's batched S_TG (olmoe-1b-7b and
# qwen3-30b-a3b at 8 / 32 / 64 sequences, qwen3-8b at 16 / 32 / 64, -npp 128 -ntg 128) beside
# llama-batched-bench, under the defaults and with FERROLM_F16_MATVEC_CLUSTER=0
# FERROLM_F16_MATVEC_ONE=0 (session 40's step), qwen3-8b with FERROLM_F16_MATVEC_OCCUPANCY=1
# too; OLMoE at 256 sequences (the goal of
# 20,000 t/s); then, while under 250 s, issue 15's tg128 table (olmoe-1b-7b, qwen3-30b-a3b,
# qwen3-8b; OLMoE and qwen3-8b at -d 16384) beside llama-bench. Pooled synth files. Usage, from
# the repo root, .device-carry/ from tools/device/pack.sh: [ONLY_Q8B=1] bash tools/device/s41_bars.sh
# (ONLY_Q8B: qwen3-8b's sweep alone)
source tools/device/carried.sh
if [ -n "$ONLY_Q8B" ]; then pooled qwen3-8b; else pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b; fi
S40="FERROLM_F16_MATVEC_CLUSTER=0 FERROLM_F16_MATVEC_ONE=0"
sweep() { # MODEL NPL [SETTING]: llama-batched-bench, then ferrolm's default, session 40's,
  # SETTING where given, the default
  local f=$M/$1-pooled.gguf v
  echo "== $1 llama-batched-bench at $(( $(date +%s) - t0 )) s"
  timeout 100 $L/llama-batched-bench -m $f -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl $2 2>&1 |
    grep -E '^\|' | tail -3
  for v in A=0 "$S40" ${3:-} A=0; do
    echo "== $1 $v"
    env $v timeout 90 $B bench -m $f --backend cuda -c 20000 -npp 128 -ntg 128 -npl $2 2>&1 |
      grep -E '^\| +[0-9]|rror|panic'
  done
}
sweep qwen3-8b 16,32,64 FERROLM_F16_MATVEC_OCCUPANCY=1
[ -z "$ONLY_Q8B" ] || { echo "end at $(( $(date +%s) - t0 )) s"; exit 0; }
sweep olmoe-1b-7b 8,32,64
sweep qwen3-30b-a3b 8,32,64
echo "== olmoe-1b-7b at 256 sequences at $(( $(date +%s) - t0 )) s"
timeout 90 $B bench -m $M/olmoe-1b-7b-pooled.gguf --backend cuda -c 70000 -npp 128 -ntg 128 -npl 256 2>&1 |
  grep -E '^\| +[0-9]|rror|panic'
for run in "qwen3-30b-a3b" "olmoe-1b-7b" "qwen3-8b" "olmoe-1b-7b -d 16384" "qwen3-8b -d 16384"; do
  [ $(( $(date +%s) - t0 )) -lt 250 ] || break
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run tg128 llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
done
echo "end at $(( $(date +%s) - t0 )) s"
