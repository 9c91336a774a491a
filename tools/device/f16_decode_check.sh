#!/bin/bash
# Issue 16's batched decode on the f16 GEMM that unpacks Q4_K weights (session 23), one device
# call (writes under $OUT): cuda-parity (the split unpacking GEMM's rows and every other), then
# qwen3-8b and olmoe-1b-7b (synth q4_k_m) in llama-batched-bench beside `ferrolm bench`'s
# batched mode with FERROLM_F16_DECODE on and off, and the single-sequence tg128 unchanged.
# The unpacked binary stays in target/dev-bin for a next call on the warm machine.
# Usage, from the repo root, .device-carry/ holding ferrolm.xz (the stripped release binary,
# xz-compressed) and llama.tar.xz (../shared/bench's archive):
#   bash tools/device/f16_decode_check.sh
# SKIP_PARITY=1: benches only; EXTRA="FERROLM_X=.. ...": more ferrolm settings to bench.
source tools/device/carried.sh
NPL=${NPL:-1,8,16,32,64}
( [ -s $M/qwen3-8b.gguf ] || $B synth --preset qwen3-8b --type q4_k_m -o $M/qwen3-8b.gguf > $OUT/synth-q.txt 2>&1
  [ -s $M/olmoe.gguf ] || $B synth --preset olmoe-1b-7b --type q4_k_m --vocab bpe -o $M/olmoe.gguf > $OUT/synth-o.txt 2>&1 ) &
SP=$!
if [ -z "$SKIP_PARITY" ]; then
echo "== parity"
timeout 300 $B cuda-parity --seed 83 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "gemm f16 decode" $OUT/parity.txt | head -20
echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
fi
wait $SP; ls -l $M
for p in qwen3-8b olmoe; do
  echo "== $p llama-batched-bench"
  timeout 200 $L/llama-batched-bench -m $M/$p.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl $NPL 2>&1 | grep -E '^\|'
  for setting in FERROLM_F16_DECODE=1 FERROLM_F16_DECODE=0 ${EXTRA:-}; do
    echo "== $p ferrolm $setting"
    env $setting timeout 150 $B bench -m $M/$p.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl $NPL 2>&1 | grep -E '^\||rror|panic'
  done
done
echo done
