#!/bin/bash
# One launch each of the kernels that bound issue 15's and 16's open bars, under ncu's full
# sections (writes under $OUT). (The device image has no nsys: KINDS.md.) qwen3-8b at 64 sequences:
# the f16 decode GEMM (gate, up; FERROLM_F16_DECODE_FIRST=1), the int8 tensor-core mat-vec (q,
# FERROLM_F16_MATVEC=0) and the f16 mat-vec (one layer's launches); qwen3-30b-a3b at
# one token: the experts, the router, attention; qwen3-8b's decode attention at 16,384 keys. Usage, from the repo root, .device-carry/
# holding ferrolm.xz: [ONLY=q8b|q30|attn] bash tools/device/kernel_deep.sh (ONLY: one model's part)
source tools/device/carried.sh
P8=$M/qwen3-8b-pooled.gguf; P30=$M/qwen3-30b-a3b-pooled.gguf
want() { [ -z "$ONLY" ] || [ "$ONLY" = $1 ]; }
pooled $({ want q8b || want attn; } && echo qwen3-8b) $(want q30 && echo qwen3-30b-a3b)
echo "models at $(( $(date +%s) - t0 )) s"
NCU="ncu --clock-control none --cache-control none --import-source no --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
one() { # NAME MODEL KERNEL SKIP BENCH_ARGS... (COUNT=n: n launches from SKIP, each summed up)
  local name=$1 model=$2 k=$3 skip=$4 count=${COUNT:-1}; shift 4
  echo "== $name ($k, launches $skip + $count) at $(( $(date +%s) - t0 )) s"
  FERROLM_CUDA_GRAPH=0 timeout 120 $NCU -k regex:$k --launch-skip $skip --launch-count $count \
    $B bench -m $model --backend cuda "$@" > $OUT/$name.txt 2>&1
  # Each launch: its header, then its figures and its five largest stalls.
  awk '/^  [a-z_]+.*\(/ { if (n) flush(); n = 1; hdr = $0; body = ""; stalls = ""; next }
       /Duration|DRAM Throughput|Compute \(SM\) Th|Registers Per|Achieved Occ|Issued Ipc A|No Eligible|Warp Cycles Per Issued|Dynamic Shared/ { body = body $0 "\n" }
       /issue_stalled/ { stalls = stalls $NF " " $1 "\n" }
       function flush() { print hdr; printf "%s", body; cmd = "sort -g -r | head -5"; printf "%s", stalls | cmd; close(cmd) }
       END { if (n) flush() }' $OUT/$name.txt
}
B64="-c 1024 -npp 8 -ntg 2 -npl 64"
if want q8b; then
FERROLM_F16_DECODE_FIRST=1 one q8b-gate $P8 gemm_wgmma_q4k_decode 4 $B64
FERROLM_F16_MATVEC=0 one q8b-mma $P8 mmvq_mma_q4_k_m2_t8 6 $B64
# One layer's f16 mat-vec launches (q, k, o, gate, up and a Q4_K down or v): their stalls by size.
COUNT=6 one q8b-f16mv $P8 matvec_f16 10 $B64
fi
if want attn; then
# Decode attention at 16,384 keys (qwen3-8b, the tensor-core group block): one launch's full
# sections with its source counters.
D16="-p 0 -n 2 -d 16384 -r 1"
NCU="$NCU --section SourceCounters" one q8b-attn16k $P8 attn_decode_group 40 $D16
fi
want q30 || { echo "end at $(( $(date +%s) - t0 )) s"; exit 0; }
TG="-p 0 -n 4 -r 1"
one q30-gate-up $P30 moe_gate_up_q4_k_n1 20 $TG
one q30-down $P30 moe_down_q6_k_n1 10 $TG
one q30-route $P30 add_rms_norm_route_small 20 $TG
one q30-attn $P30 attn_decode_group 20 $TG
echo "end at $(( $(date +%s) - t0 )) s"
