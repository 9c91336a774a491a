#!/bin/bash
# Session 40's three unmeasured switches, one device call (writes under $OUT):
# FERROLM_ROUTE_SPREAD_OUT=1 (the router launch's norm outputs a share a block, after each
# block's count), FERROLM_CUDA_PREFETCH_MAX_MB=16 (the weight prefetch before the wait for
# mat-vecs of at most 16 MB alone) and FERROLM_F16_MATVEC_Q4K_STAGE=1 (the f16 mat-vec's Q4_K
# weights through shared memory). In order: cuda-parity (its "outputs a share a block" and
# "weights through shared memory" rows: the same bits); OLMoE's and qwen3-30b-a3b's logits
# over 60 steps one token a step with and without the spread (md5s equal: the same bits);
# tg128 of olmoe-1b-7b, qwen3-30b-a3b, qwen3-8b and OLMoE at -d 16384 beside llama-bench,
# default twice, with the spread twice, with the prefetch once; qwen3-8b's batched S_TG at 16 /
# 32 / 64 sequences with the Q4_K staging off / on / off beside llama-batched-bench; a 64-row
# step's Q4_K launches under ncu either way. Pooled synth files. Usage, from the repo root,
# .device-carry/ from tools/device/pack.sh: [SEED=181] [PARITY=0] bash tools/device/s40_next.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-181}
  for rows in "outputs a share a block" "weights through shared memory"; do
    echo "'$rows' rows: $(grep -c "$rows" $OUT/parity.txt), passing: $(grep "$rows" $OUT/parity.txt | grep -c '| PASS |')"
  done
fi
SPREAD=FERROLM_ROUTE_SPREAD_OUT=1
for p in olmoe-1b-7b qwen3-30b-a3b; do
  for v in A=0 $SPREAD; do
    echo "logits $p $v $(logits_md5 $M/$p-pooled.gguf $v)"
  done
done
PF=FERROLM_CUDA_PREFETCH_MAX_MB=16
for run in "olmoe-1b-7b" "qwen3-30b-a3b" "qwen3-8b" "olmoe-1b-7b -d 16384"; do
  set -- $run; F=$M/$1-pooled.gguf; shift; EXTRA="$*"
  echo "== $run llama-bench $(llama_tg128) ferrolm $(tg128 A=0) / $(tg128 A=0) spread $(tg128 $SPREAD) / $(tg128 $SPREAD) prefetch<=16MB $(tg128 $PF) at $(( $(date +%s) - t0 )) s"
done
F=$M/qwen3-8b-pooled.gguf EXTRA=
batched_sweep FERROLM_F16_MATVEC_Q4K_STAGE
for s in 0 1; do
  echo "== ncu Q4_K launches, switch $s: $(FERROLM_CUDA_GRAPH=0 FERROLM_F16_MATVEC_Q4K_STAGE=$s ncu_line q4k-$s.txt \
    -k regex:matvec_f16_q4_k --launch-skip 5 --launch-count 5 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active \
    $B bench -m $F --backend cuda -c 1024 -npp 8 -ntg 2 -npl 64)"
done
echo "end at $(( $(date +%s) - t0 )) s"
