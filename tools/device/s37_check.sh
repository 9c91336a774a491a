#!/bin/bash
# Session 37: the decode walk that norms and rotates its own heads and stores its key
# (FERROLM_ATTN_ROPE). cuda-parity (its attn_decode_group_tc_rope rows among all), the
# shape-space goldens one token a step on CUDA with the switch on, then tg128 default / switch
# beside llama-bench with ncu of the walk either way (s36_check.sh). Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz, goldens/shape-space in the tree:
#   [SWITCHES=...] [PRESETS=...] bash tools/device/s37_check.sh
source tools/device/carried.sh
run_parity 171
echo "attn rope rows: $(grep -c 'attn_decode_group_tc_rope' $OUT/parity.txt)," \
  "failing $(grep 'attn_decode_group_tc_rope' $OUT/parity.txt | grep -c FAIL)"
echo "== goldens one token a step, FERROLM_ATTN_ROPE=1"
FERROLM_ATTN_ROPE=1 timeout 150 python3 $T/golden_check.py $B goldens/shape-space -- \
  --backend cuda --step 2>&1 | tail -6
PARITY=0 PRESETS=${PRESETS:-"qwen3-30b-a3b qwen3-8b"} SWITCHES=${SWITCHES:-FERROLM_ATTN_ROPE=1} \
  KERNELS=${KERNELS:-attn_decode_group_tc} bash $T/s36_check.sh
