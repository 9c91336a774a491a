#!/bin/bash
# Issue 16's staged tensor-core mat-vec (session 28, FERROLM_MMVQ_MMA_STAGED, off by default until
# this runs), one device call (writes under $OUT): qwen3-8b (synth q4_k_m) in
# llama-batched-bench beside `ferrolm bench`'s batched mode with the staged kernel on and off
# (and from 17 rows), then ncu's time of a 64-row step's products on each path. Run after
# moe_step_check.sh on the same warm machine (its cuda-parity has the mmvq_staged rows), or
# with PARITY=1. Usage, from the repo root, .device-carry/ holding ferrolm.xz and llama.tar.xz
# (see carried.sh): bash tools/device/staged_check.sh
source tools/device/carried.sh
P=qwen3-8b
[ -s $M/$P.gguf ] || $B synth --preset $P --type q4_k_m -o $M/$P.gguf > $OUT/synth.txt 2>&1 &
SP=$!
if [ -n "$PARITY" ]; then
  timeout 200 $B cuda-parity --seed 107 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
  echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
fi
wait $SP
echo "== $P llama-batched-bench at $(( $(date +%s) - t0 )) s"
timeout 150 $L/llama-batched-bench -m $M/$P.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\|' | tail -3
for setting in FERROLM_MMVQ_MMA_STAGED=1 FERROLM_MMVQ_MMA_STAGED=0 "FERROLM_MMVQ_MMA_STAGED=1 FERROLM_MMVQ_MMA_STAGED_ROWS=17" \
    "FERROLM_MMVQ_MMA_STAGED=1 FERROLM_CUDA_INT_SCALES=1" "FERROLM_MMVQ_MMA_STAGED=1 FERROLM_MMVQ_MMA_STAGED_SPLITS=4"; do
  echo "== $P ferrolm $setting at $(( $(date +%s) - t0 )) s"
  env $setting timeout 100 $B bench -m $M/$P.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
done
# A 64-row step's products, per kernel (serialized; graphs off under ncu's replay; the
# prompt passes' GEMMs are other kernels), and one staged launch's registers and stalls.
NCU="ncu --clock-control none --cache-control none"
for on in 1 0; do
  echo "== ncu FERROLM_MMVQ_MMA_STAGED=$on at $(( $(date +%s) - t0 )) s"
  FERROLM_MMVQ_MMA_STAGED=$on FERROLM_CUDA_GRAPH=0 timeout 150 $NCU --csv --print-units base \
    --metrics gpu__time_duration.sum -k regex:'mmvq|wgmma_q4k_decode' \
    $B bench -m $M/$P.gguf --backend cuda -c 1024 -npp 8 -ntg 2 -npl 64 \
    > $OUT/ncu-staged$on.csv 2>/dev/null
  python3 $T/kernel_times.py $OUT/ncu-staged$on.csv 2 | head -12
done
FERROLM_MMVQ_MMA_STAGED=1 FERROLM_CUDA_GRAPH=0 timeout 120 $NCU -k regex:mmvq_staged_q4_k_subs_t8 \
  --launch-skip 2 --launch-count 1 --section LaunchStats --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
  $B bench -m $M/$P.gguf --backend cuda -c 1024 -npp 8 -ntg 2 -npl 64 > $OUT/ncu-staged-one.txt 2>&1
grep -E "Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Bank Conflicts|Local" $OUT/ncu-staged-one.txt | head -12
grep -E "issue_stalled" $OUT/ncu-staged-one.txt | sort -k3 -n -r | head -6
echo "end at $(( $(date +%s) - t0 )) s"
