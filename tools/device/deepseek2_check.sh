#!/bin/bash
# deepseek2 on the GPU machine, in one device call (writes under $OUT):
#   1. the tiny deepseek2 goldens through the CLI on the CPU and on CUDA (the F32 ones with the
#      f32 cache, as llama.cpp made them);
#   2. `ferrolm synth --preset deepseek2-lite --type q4_k_m` (10.4 GB) in llama.cpp's llama-bench
#      and in ferrolm bench on CUDA, pp2048 and tg128.
# Usage, from the repo root, with llama.cpp unpacked as ../shared/bench/README.md says:
#   bash tools/device/deepseek2_check.sh BIN_DIR LLAMA_BIN_DIR
B=$1/ferrolm
L=$2
T=$(dirname "$0")
M=target/device-models # ignored, so it stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M

echo "== tiny deepseek2 goldens (CPU; golden_check.py makes the models from the recipe with $B)"
G=goldens/deepseek2
python3 $T/golden_check.py $B $G tiny-deepseek2-q8_0 tiny-deepseek2-q4_k_m tiny-deepseek2-qlora-q8_0 -- --backend cpu 2>&1 | tee $OUT/goldens.txt
python3 $T/golden_check.py $B $G tiny-deepseek2-f32 tiny-deepseek2-qlora-f32 -- --backend cpu --cache-type f32 2>&1 | tee -a $OUT/goldens.txt
echo "== tiny deepseek2 goldens on CUDA"
python3 $T/golden_check.py $B $G tiny-deepseek2-q8_0 tiny-deepseek2-q4_k_m tiny-deepseek2-qlora-q8_0 -- --backend cuda 2>&1 | tee -a $OUT/goldens.txt
python3 $T/golden_check.py $B $G tiny-deepseek2-f32 tiny-deepseek2-qlora-f32 -- --backend cuda --cache-type f32 2>&1 | tee -a $OUT/goldens.txt

echo "== deepseek2-lite (q4_k_m): llama-bench, then ferrolm bench on the same file"
F=$M/deepseek2-lite-q4_k_m.gguf
[ -f $F ] || timeout 400 $B synth --preset deepseek2-lite --type q4_k_m -o $F 2>&1 | tail -1
ls -l $F
timeout 240 $L/llama-bench -m $F -ngl 99 -fa 1 -p 2048 -n 128 -ub 512,2048 -r 2 2>&1 | grep -E '^\|' | tee $OUT/llama-bench.txt
timeout 240 $B bench -m $F --backend cuda -p 2048 -n 128 --ubatch-size 2048 -r 2 2>&1 | grep -E '^\||error' | tee $OUT/ferrolm-bench.txt
