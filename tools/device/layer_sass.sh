#!/bin/bash
# One qwen3-30b-a3b layer's one-token kernels under ncu's source counters, each digested
# (tools/device/sass_digest.py: a warp's instructions, its opcodes, stalls, memory order) into
# $OUT/layer_sass.txt. Usage, from the repo root, .device-carry/ holding ferrolm.xz:
#   [SKIP=40] bash tools/device/layer_sass.sh
source tools/device/carried.sh
P30=$M/qwen3-30b-a3b-pooled.gguf
pooled qwen3-30b-a3b
FERROLM_CUDA_GRAPH=0 timeout 240 ncu --clock-control none --cache-control none --import-source no \
  --section SourceCounters --section WarpStateStats \
  -k regex:'^(add_rms|mmvq_wide|qk_norm|attn_decode|moe_gate|moe_down|quantize_q8_k|kv_store)' \
  --launch-skip ${SKIP:-40} --launch-count 10 -o $OUT/layer $B bench -m $P30 --backend cuda \
  -p 0 -n 4 -r 1 > $OUT/layer.log 2>&1
echo "ncu rc=$? at $(( $(date +%s) - t0 )) s"
ncu -i $OUT/layer.ncu-rep --page source --csv --print-source sass > $OUT/layer.sass.csv 2>&1
python3 $T/sass_digest.py $OUT/layer.sass.csv > $OUT/layer_sass.txt 2>&1
grep "^==" $OUT/layer_sass.txt
gzip -f $OUT/layer.sass.csv; rm -f $OUT/layer.ncu-rep
