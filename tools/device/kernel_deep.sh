#!/bin/bash
# One launch each of the kernels that bound issue 15's and 16's open bars, under ncu's full
# sections (writes under $OUT), and the single-sequence decode timeline under nsys (graph nodes
# traced: real durations with PDL overlap, where ncu serializes). qwen3-8b at 64 sequences:
# the f16 decode GEMM (gate, up) and the tensor-core mat-vec (q, k, o, ...); qwen3-30b-a3b at
# one token: the experts, the router, attention. Usage, from the repo root, .device-carry/
# holding ferrolm.xz: [ONLY=q8b|q30] bash tools/device/kernel_deep.sh (ONLY: one model's part)
source tools/device/carried.sh
t0=$(date +%s)
P8=$M/qwen3-8b.gguf; P30=$M/qwen3-30b-a3b.gguf
want() { [ -z "$ONLY" ] || [ "$ONLY" = $1 ]; }
want q8b && { [ -s $P8 ] || $B synth --preset qwen3-8b --type q4_k_m -o $P8 > /dev/null 2>&1 & }
want q30 && { [ -s $P30 ] || $B synth --preset qwen3-30b-a3b --type q4_k_m --pooled -o $P30 > /dev/null 2>&1 & }
wait
echo "models at $(( $(date +%s) - t0 )) s"
NCU="ncu --clock-control none --cache-control none --import-source no --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
one() { # NAME MODEL KERNEL SKIP BENCH_ARGS...
  local name=$1 model=$2 k=$3 skip=$4; shift 4
  echo "== $name ($k, launch $skip) at $(( $(date +%s) - t0 )) s"
  FERROLM_CUDA_GRAPH=0 timeout 120 $NCU -k regex:$k --launch-skip $skip --launch-count 1 \
    $B bench -m $model --backend cuda "$@" > $OUT/$name.txt 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Th|Registers Per|Achieved Occ|Grid Size|Block Size|Issued Ipc A|No Eligible|Warp Cycles Per Issued|Theoretical Occ|Dynamic Shared" $OUT/$name.txt | head -16
  grep -E "issue_stalled" $OUT/$name.txt | sort -k3 -n -r | head -5
}
B64="-c 1024 -npp 8 -ntg 2 -npl 64"
if want q8b; then
one q8b-gate $P8 gemm_wgmma_q4k_decode 4 $B64
one q8b-mma $P8 mmvq_mma_q4_k_m2_t8 6 $B64
FERROLM_F16_MATVEC=1 one q8b-f16mv $P8 matvec_f16_q4_k_t8 6 $B64
fi
want q30 || { echo "end at $(( $(date +%s) - t0 )) s"; exit 0; }
TG="-p 0 -n 4 -r 1"
one q30-gate-up $P30 moe_gate_up_q4_k_n1 20 $TG
one q30-down $P30 moe_down_q6_k_n1 10 $TG
one q30-route $P30 add_rms_norm_route_small 20 $TG
one q30-attn $P30 attn_decode_group 20 $TG
echo "== nsys qwen3-30b-a3b tg (graph nodes) at $(( $(date +%s) - t0 )) s"
timeout 150 nsys profile --cuda-graph-trace=node -o $OUT/q30tg -f true \
  $B bench -m $P30 --backend cuda -p 0 -n 64 -r 1 > $OUT/nsys.txt 2>&1
timeout 100 nsys stats --report cuda_gpu_kern_sum --format csv $OUT/q30tg.nsys-rep > $OUT/q30tg-kern.csv 2>&1
head -20 $OUT/q30tg-kern.csv | cut -c1-160
rm -f $OUT/q30tg.sqlite
echo "end at $(( $(date +%s) - t0 )) s"
