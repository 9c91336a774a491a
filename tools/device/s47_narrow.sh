#!/bin/bash
# Session 47: FERROLM_ROUTE_NARROW (one token's router launch in blocks of 128 or 256 threads,
# the norm's f64 sums in the 512-thread norm's order: the same bits; a 512-thread block at 64
# registers holds half an SM's registers, so it may not start beside the mat-vec ahead of it).
# In order: both MoE models' logits over 60 steps one token a step under 0 / 128 / 256 (the
# same md5 expected); tg128 beside llama-bench, 0 / 128 / 256 twice, qwen3-30b-a3b then OLMoE;
# OLMoE at -d 16384; the router's chain cost each way (FERROLM_TIMING_SKIP); one router launch
# of each under ncu (duration, registers, occupancy, warp stalls); then cuda-parity (its
# "narrow blocks" rows). Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   [PARITY=0] bash tools/device/s47_narrow.sh
source tools/device/carried.sh
R=FERROLM_ROUTE_NARROW
pooled qwen3-30b-a3b olmoe-1b-7b
for p in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$p-pooled.gguf
  echo "logits $p 0 $(logits_md5 $F A=0) 128 $(logits_md5 $F $R=128) 256 $(logits_md5 $F $R=256) at $(( $(date +%s) - t0 )) s"
done
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf; EXTRA=
  echo "== $p llama-bench $(llama_tg128) at $(( $(date +%s) - t0 )) s"
  for r in 1 2; do
    echo "  0 $(tg128 A=0) | 128 $(tg128 $R=128) | 256 $(tg128 $R=256) at $(( $(date +%s) - t0 )) s"
  done
done
F=$M/olmoe-1b-7b-pooled.gguf; EXTRA="-d 16384"
echo "== olmoe-1b-7b -d 16384 llama-bench $(llama_tg128) | 0 $(tg128 A=0) | 128 $(tg128 $R=128) | 256 $(tg128 $R=256) at $(( $(date +%s) - t0 )) s"
F=$M/qwen3-30b-a3b-pooled.gguf; EXTRA=
echo "== qwen3-30b-a3b chain: no router (0) $(tg128 FERROLM_TIMING_SKIP=add_rms_norm_route_small) | no router (128) $(tg128 $R=128 FERROLM_TIMING_SKIP=add_rms_norm_route_narrow) at $(( $(date +%s) - t0 )) s"
for v in small:0 narrow:128 narrow:256; do
  k=add_rms_norm_route_${v%%:*}
  env $R=${v##*:} FERROLM_CUDA_GRAPH=0 timeout 100 ncu --clock-control none --cache-control none \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
    -k regex:$k --launch-skip 20 --launch-count 1 \
    $B bench -m $F --backend cuda -p 0 -n 4 -r 1 > $OUT/ncu_${v%%:*}${v##*:}.txt 2>&1
  echo "== ncu $v: $(grep -E 'Duration|Registers Per|Achieved Occ|Warp Cycles Per Issued|Block Limit Registers' $OUT/ncu_${v%%:*}${v##*:}.txt | awk '{print $1,$2,$3,$NF}' | tr '\n' ';')"
done
# The mat-vec ahead of the router (o, mmvq_wide_q*): its grid, block, registers and limits.
FERROLM_CUDA_GRAPH=0 timeout 100 ncu --clock-control none --cache-control none \
  --section LaunchStats --section Occupancy --section SpeedOfLight \
  -k regex:mmvq_wide_q --launch-skip 20 --launch-count 1 \
  $B bench -m $F --backend cuda -p 0 -n 4 -r 1 > $OUT/ncu_o.txt 2>&1
echo "== ncu o: $(grep -E 'mmvq_wide_q|Duration|Grid Size|Block Size|Registers Per|Block Limit|Achieved Occ|Waves' $OUT/ncu_o.txt | awk '{print $1,$2,$3,$NF}' | tr '\n' ';')"
[ "${PARITY:-1}" = 0 ] || run_parity 193
echo "end at $(( $(date +%s) - t0 )) s"
