#!/bin/bash
# Session 36: switches of the one-token kernels (SWITCH, or several in SWITCHES; default
# FERROLM_MOE_ROWS_L1=1, the rows asked of L1 before the walk). tg128 default / each switch in
# two interleaved rounds beside llama-bench (PRESETS: qwen3-30b-a3b, olmoe-1b-7b), one launch
# of each kernel in KERNELS under ncu with the first switch and without (time, SM cycles,
# instructions), then cuda-parity (PARITY=0 skips it). Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   [PRESETS=...] [SWITCHES="A=1 B=0 A=1,B=0"] [KERNELS=...] bash tools/device/s36_check.sh
# (an entry's commas separate settings taken together). The next session's first call (the
# three switches written after session 36's last call, then all of them):
#   SWITCHES="FERROLM_MOE_GATE_UP_DIRECT=1 FERROLM_MOE_LEAN=1 FERROLM_NORM_EXACT=1 \
#   FERROLM_MOE_GATE_UP_DIRECT=1,FERROLM_MOE_LEAN=1,FERROLM_NORM_EXACT=1" \
#   KERNELS="moe_gate_up_q4_k_n1 add_rms_norm_q8_1_f32" bash tools/device/s36_check.sh
source tools/device/carried.sh
PRESETS=${PRESETS:-"qwen3-30b-a3b olmoe-1b-7b"}
SWITCHES=${SWITCHES:-${SWITCH:-FERROLM_MOE_ROWS_L1=1}}
SWITCH=${SWITCHES%% *}
pooled $PRESETS
echo "models at $(( $(date +%s) - t0 )) s"
tg() { timeout 90 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in $PRESETS; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  for round in 1 2; do
    line="== $P round $round, default $(tg A=0)"
    for s in $SWITCHES; do line="$line / $s $(tg ${s//,/ })"; done
    echo "$line at $(( $(date +%s) - t0 )) s"
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
