#!/bin/bash
# The f16 mat-vec's Q6_K weights through shared memory (FERROLM_F16_MATVEC_Q6K_STAGE, written in
# session 32 without a device run), one device call (writes under $OUT): cuda-parity (its
# "weights through shared memory" rows: the register path's bits), qwen3-8b at 16 / 32 / 64
# sequences with the switch off / on / off beside llama-batched-bench, and a 64-row step's Q6_K
# launches (v, down) under ncu either way. Pooled synth file. Usage, from the repo root,
# .device-carry/ from tools/device/pack.sh: [PARITY=0] bash tools/device/q6k_stage_check.sh
source tools/device/carried.sh
pooled qwen3-8b
F=$M/qwen3-8b-pooled.gguf
if [ "${PARITY:-1}" = 1 ]; then
  run_parity 151
  echo "shared-memory rows: $(grep -c 'weights through shared memory' $OUT/parity.txt), passing: $(grep 'weights through shared memory' $OUT/parity.txt | grep -c '| PASS |')"
fi
batched_sweep FERROLM_F16_MATVEC_Q6K_STAGE
for s in 0 1; do
  echo "== ncu Q6_K launches, switch $s: $(FERROLM_CUDA_GRAPH=0 FERROLM_F16_MATVEC_Q6K_STAGE=$s ncu_line q6k-$s.txt \
    -k regex:matvec_f16_q6_k --launch-skip 4 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio \
    $B bench -m $F --backend cuda -c 1024 -npp 8 -ntg 2 -npl 64)"
done
echo "end at $(( $(date +%s) - t0 )) s"
