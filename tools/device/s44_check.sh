#!/bin/bash
# Session 44's calls (write under $OUT). Issue 16's single-sequence bar ("tg128 and pp2048 do
# not fall by more than 3%") as an A/B on one machine: a binary from before the batched
# decode work's single-sequence changes (OLD, session 20's f1b62f2, built on this machine
# with FERROLM_AOT_ARCHS=sm_90a and packed as pack.sh packs) against this one.
#   OLD=1 bash tools/device/s44_check.sh   (call A: .device-carry/ferrolm.xz holds the old
#                                            binary; it is kept as target/dev-bin/ferrolm-old
#                                            while the machine stays warm)
#   [PARITY=0] bash tools/device/s44_check.sh   (call B, the same warm machine, this build:
#       cuda-parity; qwen3-8b's S_TG at 32 / 64 with the default's 6-super-block shares and
#       with FERROLM_F16_DECODE_SHARE_BLOCKS=8 beside llama-batched-bench; then each preset's
#       pp2048 (ubatch 2048) and tg128, old / new / old / new, beside llama-bench)
source tools/device/carried.sh
OLD_B=target/dev-bin/ferrolm-old
if [ -n "$OLD" ]; then
  # Only kept: the old binary has no `synth --pooled`, so the next call writes the models.
  cp $B $OLD_B && $OLD_B --version
  exit 0
fi
[ -x $OLD_B ] || { echo "no $OLD_B: run OLD=1 first on this warm machine"; exit 1; }
pooled qwen3-8b olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-184}
  echo "'gemm f16 decode' rows: $(grep -c 'gemm f16 decode' $OUT/parity.txt), passing: $(grep 'gemm f16 decode' $OUT/parity.txt | grep -c '| PASS |')"
fi
F=$M/qwen3-8b-pooled.gguf
echo "== qwen3-8b llama-batched-bench at $(( $(date +%s) - t0 )) s"
timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 32,64 2>&1 |
  grep -E '^\|' | tail -2
for v in A=0 FERROLM_F16_DECODE_SHARE_BLOCKS=8 A=0; do
  echo "== $v"
  env $v timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 32,64 2>&1 |
    grep -E '^\| +[0-9]|rror|panic'
done
pp() { timeout 100 $1 bench -m $F --backend cuda -p 2048 -n 0 --ubatch-size 2048 -r 2 2>&1 |
  grep -E 'pp2048|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
tg() { timeout 100 $1 bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 |
  grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for p in qwen3-8b olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$p-pooled.gguf
  echo "== $p at $(( $(date +%s) - t0 )) s"
  echo "llama-bench: $(timeout 150 $L/llama-bench -m $F -ngl 99 -fa 1 -ub 2048 -p 2048 -n 128 -r 2 2>&1 |
    grep -E '^\| .*(pp|tg)' | awk -F'|' '{printf "%s %s; ", $(NF-2), $(NF-1)}')"
  echo "pp2048 old / new / old / new: $(pp $OLD_B) / $(pp $B) / $(pp $OLD_B) / $(pp $B)"
  echo "tg128 old / new / old / new: $(tg $OLD_B) / $(tg $B) / $(tg $OLD_B) / $(tg $B)"
done
echo "end at $(( $(date +%s) - t0 )) s"
