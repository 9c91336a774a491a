#!/bin/bash
# deepseek2 on the GPU machine, in one device call (writes under $OUT):
#   1. the tiny deepseek2 goldens through the CLI on the CPU (CUDA refuses deepseek2 until its
#      attention kernels take the latent attention's scale and value heads: the refusal is
#      checked too);
#   2. `ferrolm synth --preset deepseek2-lite --type q4_k_m` (10.4 GB) loads and runs in
#      llama.cpp's llama-bench, and ferrolm reads the same file (and runs it on the CPU for a
#      few tokens).
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
echo "== CUDA refuses deepseek2 by name (expected: an error naming --backend cpu)"
tiny=$(mktemp -d)/tiny-deepseek2-q8_0.gguf
$B synth --recipe $G/tiny-deepseek2.recipe.json --type q8_0 -o $tiny > /dev/null 2>&1
$B logits -m $tiny --tokens "1 2 3" --backend cuda 2>&1 | tail -1

echo "== deepseek2-lite (q4_k_m) in llama-bench"
F=$M/deepseek2-lite-q4_k_m.gguf
[ -f $F ] || timeout 400 $B synth --preset deepseek2-lite --type q4_k_m -o $F 2>&1 | tail -1
ls -l $F
timeout 240 $L/llama-bench -m $F -ngl 99 -fa 1 -p 512 -n 32 -r 1 2>&1 | tail -6 | tee $OUT/llama-bench.txt
$B inspect $F 2>&1 | head -20
timeout 120 $B logits -m $F --backend cpu --tokens "2 100 200 300" 2>&1 | head -c 300; echo
