#!/bin/bash
# Session 44's router call (writes under $OUT), on a machine where `OLD=1 bash
# tools/device/s44_check.sh` has left target/dev-bin/ferrolm-old (session 20's binary):
# the MoE presets' pp2048 (ubatch 2048), old / new / new with FERROLM_GEMM_F32_TOKEN_WARPS=1
# (the f32 GEMM's old block layout) / old / new, then each one's stage split
# (FERROLM_CUDA_PROFILE=1) old and new, then cuda-parity (the gemm_f32 rows in every layout
# counted). Usage: [PARITY=0] bash tools/device/s44_router.sh
source tools/device/carried.sh
OLD_B=target/dev-bin/ferrolm-old
[ -x $OLD_B ] || { echo "no $OLD_B: run OLD=1 bash tools/device/s44_check.sh first"; exit 1; }
pooled olmoe-1b-7b qwen3-30b-a3b
pp() { timeout 100 env "$@" bench -m $F --backend cuda -p 2048 -n 0 --ubatch-size 2048 -r 2 2>&1 |
  grep -E 'pp2048|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for p in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$p-pooled.gguf
  echo "== $p at $(( $(date +%s) - t0 )) s"
  echo "pp2048 old / new / new TW=1 / old / new: $(pp $OLD_B) / $(pp $B) / $(pp FERROLM_GEMM_F32_TOKEN_WARPS=1 $B) / $(pp $OLD_B) / $(pp $B)"
  for b in $OLD_B $B; do
    FERROLM_CUDA_PROFILE=1 timeout 100 $b bench -m $F --backend cuda -p 2048 -n 0 --ubatch-size 2048 -r 1 > $OUT/prof-$p-$(basename $b).txt 2>&1
    echo "$(basename $b): $(grep -E '^\| (moe.route|total) ' $OUT/prof-$p-$(basename $b).txt | tr -s ' ' | tr '\n' ' ')"
  done
done
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-185}
  echo "gemm_f32 rows: $(grep -c '^| gemm_f32' $OUT/parity.txt), passing: $(grep '^| gemm_f32' $OUT/parity.txt | grep -c '| PASS |')"
fi
echo "end at $(( $(date +%s) - t0 )) s"
