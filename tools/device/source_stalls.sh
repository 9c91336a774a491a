#!/bin/bash
# Where one token's expert and router kernels of qwen3-30b-a3b stall, line by line of SASS:
# one launch each under ncu's SourceCounters, its report saved, its source page exported as
# CSV (warp-stall samples and instructions executed per SASS line), and the 40 costliest lines
# printed. Usage, from the repo root, .device-carry/ holding ferrolm.xz:
#   bash tools/device/source_stalls.sh
source tools/device/carried.sh
P30=$M/qwen3-30b-a3b-pooled.gguf
pooled qwen3-30b-a3b
echo "model at $(( $(date +%s) - t0 )) s"
TG="-p 0 -n 4 -r 1"
deep() { # NAME KERNEL SKIP
  local name=$1 k=$2 skip=$3
  FERROLM_CUDA_GRAPH=0 timeout 150 ncu --clock-control none --cache-control none \
    --import-source no --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    --section InstructionStats --section LaunchStats --section Occupancy \
    -k regex:$k --launch-skip $skip --launch-count 1 -o $OUT/$name \
    $B bench -m $P30 --backend cuda $TG > $OUT/$name.log 2>&1
  echo "== $name rc=$? at $(( $(date +%s) - t0 )) s"
  ncu -i $OUT/$name.ncu-rep --page details > $OUT/$name.details.txt 2>&1
  grep -E 'Duration|Issued Ipc|Executed Ipc|Registers Per|Achieved Occ|Executed Instructions |Warp Cycles Per Issued' $OUT/$name.details.txt | head -12
  ncu -i $OUT/$name.ncu-rep --page source --csv --print-source sass > $OUT/$name.sass.csv 2>&1
  head -2 $OUT/$name.sass.csv | cut -c1-600
  wc -l $OUT/$name.sass.csv
}
deep down moe_down_q6_k_n1 10
deep gateup moe_gate_up_q4_k_n1 20
deep route add_rms_norm_route_small 20
echo "end at $(( $(date +%s) - t0 )) s"
