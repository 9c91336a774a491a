#!/bin/bash
# Issue 16's f16 mat-vec (session 29, FERROLM_F16_MATVEC, off by default until measured), one
# device call (writes under $OUT): qwen3-8b (synth q4_k_m) batched decode at 16 / 32 / 64
# sequences under each of SETTINGS (default: the kernel on, then off), beside
# llama-batched-bench when llama.cpp is unpacked; then with PARITY=1 cuda-parity (the `matvec
# f16` rows: unsplit, split and in 3 shares against the f64 product and a second run; every
# split-K row); with NCU=1 ncu's time of a 64-row step's products. A call may carry
# ferrolm.xz or llama.tar.xz alone: the binary and the model stay on the warm machine.
# Usage, from the repo root: [PARITY=1] [NCU=1] bash tools/device/f16_matvec_check.sh
source tools/device/carried.sh
P=qwen3-8b
[ -s $M/$P.gguf ] || $B synth --preset $P --type q4_k_m -o $M/$P.gguf > $OUT/synth.txt 2>&1 &
SP=$!
wait $SP
if [ -x $L/llama-batched-bench ]; then
  echo "== $P llama-batched-bench at $(( $(date +%s) - t0 )) s"
  timeout 150 $L/llama-batched-bench -m $M/$P.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\|' | tail -3
fi
for setting in ${SETTINGS:-FERROLM_F16_MATVEC=1 FERROLM_F16_MATVEC=0}; do
  echo "== $P ferrolm $setting at $(( $(date +%s) - t0 )) s"
  env $setting timeout 100 $B bench -m $M/$P.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
done
if [ -n "$PARITY" ]; then
  timeout 240 $B cuda-parity --seed 111 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt) at $(( $(date +%s) - t0 )) s"
  echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | cut -c1-200 | head
  grep -E "matvec f16|split" $OUT/parity.txt | cut -c1-150 | head -16
fi
if [ -n "$NCU" ]; then
  echo "== ncu, a 64-row step's products, FERROLM_F16_MATVEC=1 at $(( $(date +%s) - t0 )) s"
  FERROLM_F16_MATVEC=1 FERROLM_CUDA_GRAPH=0 timeout 150 ncu --clock-control none --cache-control none \
    --csv --print-units base --metrics gpu__time_duration.sum -k regex:'mmvq|matvec_f16|wgmma_q4k_decode|round_f16' \
    $B bench -m $M/$P.gguf --backend cuda -c 1024 -npp 8 -ntg 2 -npl 64 > $OUT/ncu-f16mv.csv 2>/dev/null
  python3 $T/kernel_times.py $OUT/ncu-f16mv.csv 2 | head -12
fi
echo "end at $(( $(date +%s) - t0 )) s"
