#!/bin/bash
# CUDA attention at every head size the CPU runs (32, 64, 80, 96, 128, 256), within one device
# call:
#   1. cuda-parity: every row; printed, the attention rows of the sizes added in session 10
#      ("d 32", "d 80", "d 96", "d 256": decode split and by KV group, its combine, the batched
#      rows, the scalar / f16 mma / cpu f32 order / ggml f16 prefills, q8_0 and q4_0 caches) and
#      the Hadamard rotation in 256s, then every FAIL;
#   2. goldens/shape-space on CUDA (qwen3-d320-h80: head size 80) and goldens/llama-family on
#      CUDA (head size 32), which stopped with "attention: no kernel for head_dim" before.
# Usage on the GPU machine, from the repo root (writes under $OUT):
#   bash tools/device/heads_check.sh BIN_DIR
B=$1/ferrolm
T=$(dirname "$0")
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
OUT=${OUT:-/tmp}

echo "== cuda-parity (nothing beside it: its CPU references take every core)"
timeout 300 $B cuda-parity --seed 11 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "^\| (attn_|kv_store|hadamard)" $OUT/parity.txt | grep -E "d (32|80|96|256)|×(32|80|96|256)|of 256"
echo "== FAIL rows (none expected)"
grep FAIL $OUT/parity.txt

echo "== shape-space goldens on CUDA"
python3 $T/golden_check.py $B goldens/shape-space -- --backend cuda 2>&1 | tee $OUT/shape_space.txt
echo "== llama-family goldens on CUDA"
python3 $T/golden_check.py $B goldens/llama-family -- --backend cuda 2>&1 | tee $OUT/llama_family.txt
