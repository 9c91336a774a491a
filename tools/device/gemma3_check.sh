#!/bin/bash
# gemma3 on the GPU machine, in one device call (writes under $OUT):
#   1. the CUDA geglu and scale kernels against the CPU (cuda-parity's `geglu` and `scale` rows)
#      and every attention kernel with a sliding window (its `window` rows: decode split and by
#      KV group past the window, the scalar / f16 mma / cpu f32 order / ggml f16 prefills with
#      rows inside and past it, the batched decode rows, q8_0 and q4_0 caches), then any FAIL;
#   2. the tiny gemma3 goldens through the CLI on the CPU, then on CUDA (the same bars; the
#      F32 golden runs CUDA's f16 cache, the only one it has, against llama.cpp's F32 cache);
#   3. `ferrolm synth --preset gemma3-4b --type q4_k_m` loads and runs in llama.cpp's
#      llama-bench, and ferrolm reads the same file (and runs it on the CPU for a few tokens).
# Usage, from the repo root, with llama.cpp unpacked as ../shared/bench/README.md says:
#   bash tools/device/gemma3_check.sh BIN_DIR LLAMA_BIN_DIR
B=$1/ferrolm
L=$2
T=$(dirname "$0")
M=target/device-models # ignored, so it stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M

echo "== cuda-parity: geglu, scale, sliding-window attention"
timeout 300 $B cuda-parity --seed 11 > $OUT/parity.txt 2>&1
echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "geglu|scale |window" $OUT/parity.txt
echo "== FAIL rows (none expected)"
grep FAIL $OUT/parity.txt

echo "== tiny gemma3 goldens (CPU; golden_check.py makes the models from the recipe with $B)"
G=goldens/gemma3
python3 $T/golden_check.py $B $G tiny-gemma3-q8_0 tiny-gemma3-q4_k_m -- --backend cpu 2>&1 | tee $OUT/goldens.txt
python3 $T/golden_check.py $B $G tiny-gemma3-f32 -- --backend cpu --cache-type f32 2>&1 | tee -a $OUT/goldens.txt
echo "== tiny gemma3 goldens on CUDA"
python3 $T/golden_check.py $B $G -- --backend cuda 2>&1 | tee $OUT/goldens_cuda.txt

echo "== gemma3-4b (q4_k_m) in llama-bench"
F=$M/gemma3-4b-q4_k_m.gguf
[ -f $F ] || timeout 300 $B synth --preset gemma3-4b --type q4_k_m -o $F 2>&1 | tail -1
ls -l $F
timeout 240 $L/llama-bench -m $F -ngl 99 -fa 1 -p 512 -n 32 -r 1 2>&1 | tail -6 | tee $OUT/llama-bench.txt
$B inspect $F 2>&1 | head -20
timeout 120 $B logits -m $F --backend cpu --tokens "2 100 200 300" 2>&1 | head -c 300; echo
echo "== gemma3-4b (q4_k_m) on CUDA: the same tokens' logits (close to the CPU's above), then"
echo "   llama-bench's figures (above) and at depth 4096, where the sliding blocks read 1024 keys"
timeout 120 $B logits -m $F --backend cuda --tokens "2 100 200 300" 2>&1 | head -c 300; echo
timeout 240 $B bench -m $F -p 512 -n 32 -d 0,4096 -r 1 2>&1 | tail -6 | tee $OUT/ferrolm-bench.txt
timeout 240 $L/llama-bench -m $F -ngl 99 -fa 1 -p 512 -n 32 -d 4096 -r 1 2>&1 | tail -4 | tee -a $OUT/llama-bench.txt
