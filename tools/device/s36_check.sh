#!/bin/bash
# Session 36: a switch of the one-token expert kernels (SWITCH; FERROLM_MOE_ROWS_L1=1, the rows
# asked of L1 before the walk, unless given). tg128 off / on
# in two interleaved rounds beside llama-bench (qwen3-30b-a3b, olmoe-1b-7b), one launch of each
# one-token expert kernel under ncu with it on and off (time, SM cycles, instructions), then
# cuda-parity (PARITY=0 skips it). Usage, from the repo root, .device-carry/ holding ferrolm.xz
# and llama.tar.xz: [PRESETS=...] [SWITCH=FERROLM_MOE_ROWS_L1=1] bash tools/device/s36_check.sh
source tools/device/carried.sh
PRESETS=${PRESETS:-"qwen3-30b-a3b olmoe-1b-7b"}
SWITCH=${SWITCH:-FERROLM_MOE_ROWS_L1=1}
pooled $PRESETS
echo "models at $(( $(date +%s) - t0 )) s"
tg() { timeout 90 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in $PRESETS; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  for round in 1 2; do
    echo "== $P round $round, default / $SWITCH: $(tg A=0) / $(tg $SWITCH) at $(( $(date +%s) - t0 )) s"
  done
done
MET=gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum,smsp__average_warp_latency_per_inst_issued.ratio
F=$M/qwen3-30b-a3b-pooled.gguf
if [ -s $F ]; then
  for k in ${KERNELS:-moe_gate_up_q4_k_n1 moe_down_q6_k_n1 moe_down_q4_k_n1}; do
    for s in A=0 $SWITCH; do
      echo "ncu $k $s: $(export $s FERROLM_CUDA_GRAPH=0; ncu_line ncu-$k-${s%%=*}.txt --metrics $MET -k regex:$k --launch-skip 20 --launch-count 1 $B bench -m $F --backend cuda -p 0 -n 4 -r 1)"
    done
  done
fi
[ "${PARITY:-1}" = 0 ] || run_parity 163
echo "end at $(( $(date +%s) - t0 )) s"
