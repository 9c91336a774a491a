#!/bin/bash
# How much of a kernel's ncu duration has no SM active: elapsed cycles against the SMs' active
# cycles (mean, least, most), one launch each of qwen3-30b-a3b's one-token kernels, with
# programmatic dependent launch on and off. Usage, from the repo root, .device-carry/ holding
# ferrolm.xz: bash tools/device/active_gap.sh
source tools/device/carried.sh
P30=$M/qwen3-30b-a3b-pooled.gguf
pooled qwen3-30b-a3b
MET=gpu__time_duration.sum,gpc__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,smsp__inst_executed.sum
for pdl in 1 0; do
  for k in moe_gate_up_q4_k_n1 moe_down_q6_k_n1 quantize_q8_k kv_store add_rms_norm_route_small mmvq_wide_triple qk_norm_rope attn_decode; do
    echo "pdl=$pdl $k: $(FERROLM_CUDA_PDL=$pdl FERROLM_CUDA_GRAPH=0 ncu_line gap-$pdl-$k.txt --metrics $MET -k regex:$k --launch-skip 20 --launch-count 1 $B bench -m $P30 --backend cuda -p 0 -n 4 -r 1)"
  done
done
echo "end at $(( $(date +%s) - t0 )) s"
