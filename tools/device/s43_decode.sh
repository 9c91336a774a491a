#!/bin/bash
# (As run in session 44. FERROLM_F16_DECODE_Q6K is gone since: its settings now run the default.)
# Session 43's decode-GEMM call (writes under $OUT): qwen3-8b's batched S_TG at 32 / 64
# sequences beside llama-batched-bench under the default, FERROLM_F16_DECODE_SHARE_BLOCKS=6
# (down's 6-super-block shares on the Q4_K decode GEMM), the same with FERROLM_F16_DECODE_Q6K=1
# (the Q6_K layers' down too), SHARE_BLOCKS=2 with Q6K (o and q too), FERROLM_F16_DECODE_DEEP=1
# (its two stages now given back as soon as their MMAs are done), DEEP with down and Q6K, and
# the default again; then pp2048 of the three presets beside llama-bench (issue 16's
# single-sequence bar); then cuda-parity (its Q6_K decode rows counted: gemm_wgmma_q6k_decode
# against the f64 product, again, and two matrices in one launch). Pooled synth files. Usage,
# from the repo root, .device-carry/ from tools/device/pack.sh:
#   [SEED=183] [SWEEP=0] [PARITY=0] [PP=0] [SHORT=1] bash tools/device/s43_decode.sh   (SHORT:
#   the first four settings)
source tools/device/carried.sh
pooled qwen3-8b
F=$M/qwen3-8b-pooled.gguf
if [ "${SWEEP:-1}" = 1 ]; then
echo "== qwen3-8b llama-batched-bench at $(( $(date +%s) - t0 )) s"
timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 32,64 2>&1 |
  grep -E '^\|' | tail -2
SB=FERROLM_F16_DECODE_SHARE_BLOCKS Q6=FERROLM_F16_DECODE_Q6K=1 DEEP=FERROLM_F16_DECODE_DEEP=1
[ -n "$SHORT" ] && set -- A=0 $SB=6 "$SB=6 $Q6" $DEEP ||
  set -- A=0 $SB=6 "$SB=6 $Q6" "$SB=2 $Q6" $DEEP "$DEEP $SB=6 $Q6" A=0
for v in "$@"; do
  echo "== $v at $(( $(date +%s) - t0 )) s"
  env $v timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 32,64 2>&1 |
    grep -E '^\| +[0-9]|rror|panic'
done
fi
# Issue 16's single-sequence bar (pp2048 must not fall): each preset's pp2048 (ubatch 2048)
# beside llama-bench's best ubatch, as session 20 measured them (ratios 2.22-2.90 on the H200),
# and (TG=0 leaves them out) each one's tg128 beside llama-bench's, and OLMoE's and qwen3-8b's at
# -d 16384 (issue 15's bars).
if [ "${PP:-1}" = 1 ]; then
  pooled olmoe-1b-7b qwen3-30b-a3b
  for p in qwen3-8b olmoe-1b-7b qwen3-30b-a3b; do
    F=$M/$p-pooled.gguf
    echo "== $p pp2048 at $(( $(date +%s) - t0 )) s"
    timeout 150 $L/llama-bench -m $F -ngl 99 -fa 1 -ub 512,2048 -p 2048 -n 0 -r 2 2>&1 | grep -E '^\| .*pp'
    timeout 100 $B bench -m $F --backend cuda -p 2048 -n 0 --ubatch-size 2048 -r 2 2>&1 | grep -E 'pp2048|rror|panic'
    [ "${TG:-1}" = 1 ] && echo "tg128: llama-bench $(llama_tg128), ferrolm $(tg128 A=0) / $(tg128 A=0)"
  done
  for p in olmoe-1b-7b qwen3-8b; do
    [ "${TG:-1}" = 1 ] || break
    F=$M/$p-pooled.gguf EXTRA="-d 16384"
    echo "== $p tg128 -d 16384: llama-bench $(llama_tg128), ferrolm $(tg128 A=0) / $(tg128 A=0) at $(( $(date +%s) - t0 )) s"
  done
fi
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-183}
  for rows in "gemm f16 decode Q6_K" "three super-blocks in flight" "two matrices in one launch"; do
    echo "'$rows' rows: $(grep -c "$rows" $OUT/parity.txt), passing: $(grep "$rows" $OUT/parity.txt | grep -c '| PASS |')"
  done
fi
echo "end at $(( $(date +%s) - t0 )) s"
