#!/bin/bash
# Per-kernel GPU time of one bench run, and the stall profile of chosen kernels, with ncu
# (clocks left as they are: --clock-control none). Writes under $OUT.
# Usage on the GPU machine, from the repo root:
#   bash tools/device/profile.sh BIN MODEL NAME "BENCH ARGS" [KERNEL_REGEX SKIP]...
# e.g. profile.sh bin/ferrolm m/qwen3-8b.gguf q8b "-p 2048 -n 0 --ubatch-size 2048" mmq_q6_k 3
B=$1; M=$2; NAME=$3; ARGS=$4; shift 4
T=$(dirname "$0")
NCU="ncu --clock-control none --cache-control none"
# -r 1 still runs one warm-up pass first: the sums cover two passes (DIV=2, the default divisor;
# a decode run of -n N tokens: DIV=2N for per-token figures).
$NCU --csv --print-units base --metrics gpu__time_duration.sum \
  $B bench -m $M --backend cuda $ARGS -r 1 > /tmp/$NAME-ncu.csv 2> /tmp/$NAME-ncu.err
python3 $T/kernel_times.py /tmp/$NAME-ncu.csv ${DIV:-2} > $OUT/$NAME-kernels.txt
head -25 $OUT/$NAME-kernels.txt; tail -1 $OUT/$NAME-kernels.txt
while [ $# -ge 2 ]; do
  $NCU -k regex:$1 --launch-skip $2 --launch-count 1 --import-source no \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
    --section LaunchStats --section SourceCounters \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
    $B bench -m $M --backend cuda $ARGS -r 1 > $OUT/$NAME-$1.txt 2>&1
  grep -E "Duration|Registers Per|Issued Ipc A|No Eligible|Warp Cycles Per Issued|excessive" $OUT/$NAME-$1.txt | head -12
  grep -E "issue_stalled" $OUT/$NAME-$1.txt | sort -k3 -n -r | head -8
  shift 2
done
