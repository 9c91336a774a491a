#!/bin/bash
# Session 38: the switches that are off, measured again on today's chain (the lean experts,
# the exact norm and the rotating walks have changed what each launch costs since they were
# measured). tg128 -r 2 of pooled PRESETS beside llama-bench; the base is BASE (settings a
# binary built before a default flipped needs, space-separated), then each of SWITCHES alone
# (an entry's commas join settings), the base again at the end; then, with DEPTH (default
# 16384; 0 skips), tg128 at that depth for DEPTH_PRESETS. Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   [BASE="A=1 B=1"] [SWITCHES="C=1 D=1,E=1"] bash tools/device/s38_sweep.sh
source tools/device/carried.sh
PRESETS=${PRESETS:-"olmoe-1b-7b qwen3-30b-a3b"}
SWITCHES=${SWITCHES:-"FERROLM_MOE_H_IN_GATE_UP=1 FERROLM_NORM_IN_QKV=1 FERROLM_NORM_IN_GLU=1
FERROLM_ROUTE_TOPK_BLOCK=1 FERROLM_NORM_ROUTE_CLUSTER=1 FERROLM_MOE_ROWS_L1=1
FERROLM_MOE_DOWN_PREFETCH=1 FERROLM_ATTN_COMBINE_WALK=1"}
DEPTH=${DEPTH:-16384}; DEPTH_PRESETS=${DEPTH_PRESETS:-olmoe-1b-7b}
pooled $PRESETS
tg() { timeout 90 env $BASE "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 $EXTRA 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in $PRESETS; do
  F=$M/$P-pooled.gguf; EXTRA=
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  echo "== $P base: $(tg A=0) at $(( $(date +%s) - t0 )) s"
  for s in $SWITCHES; do echo "== $P $s: $(tg ${s//,/ })"; done
  echo "== $P base: $(tg A=0) at $(( $(date +%s) - t0 )) s"
done
[ "$DEPTH" = 0 ] && exit 0
for P in $DEPTH_PRESETS; do
  F=$M/$P-pooled.gguf; EXTRA="-d $DEPTH"
  echo "== $P d$DEPTH llama-bench: $(timeout 200 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 -d $DEPTH 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  echo "== $P d$DEPTH base: $(tg A=0) / again $(tg A=0) at $(( $(date +%s) - t0 )) s"
done
