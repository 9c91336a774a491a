#!/bin/bash
# gpt-oss on the GPU machine, in one device call (writes under $OUT):
#   1. cuda-parity (one run, the whole table in $OUT/parity.txt): the MXFP4 rows (`mmvq MXFP4`,
#      `mmq MXFP4`: tiles, split-k, the chain at 576 and 2880 wide; `moe block ... MXFP4`,
#      `moe decode in slices, MXFP4`, the `moe decode` rows of `... MXFP4 gate/up`), and
#      the rows of gpt-oss's attention and routing: sinks on every attention kernel (decode of
#      one split and of several, by KV group, the batched rows, the four prefills; with and
#      without a window of 128), kq_scale and head size 192 (deepseek2-lite's 16/16 heads), the
#      biased top-k-softmax routing (32 experts, top-4);
#   2. the tiny gpt-oss goldens through the CLI on the CPU (CUDA refuses gpt-oss until its
#      kernels exist: the refusal is checked too);
#   3. `ferrolm synth --preset gpt-oss-20b --type mxfp4_moe` (12.1 GB) loads and runs in
#      llama.cpp's llama-bench, and ferrolm reads the same file.
# Usage, from the repo root, with llama.cpp unpacked as ../shared/bench/README.md says:
#   bash tools/device/gpt_oss_check.sh BIN_DIR LLAMA_BIN_DIR
B=$1/ferrolm
L=$2
T=$(dirname "$0")
M=target/device-models # ignored, so it stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M

echo "== cuda-parity: MXFP4 mat-vec, GEMM and experts, sinks, kq_scale, head 192, gpt-oss routing"
timeout 420 $B cuda-parity --seed 11 > $OUT/parity.txt 2>&1
echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -i mxfp4 $OUT/parity.txt
grep -E "sinks|kq_scale|d 192|softmax of the top-k" $OUT/parity.txt
echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head -20

echo "== tiny gpt-oss goldens (CPU; golden_check.py makes the models from the recipe with $B)"
G=goldens/gpt-oss
python3 $T/golden_check.py $B $G tiny-gpt-oss-mxfp4-q8_0 -- --backend cpu 2>&1 | tee $OUT/goldens.txt
python3 $T/golden_check.py $B $G tiny-gpt-oss-mxfp4-f32 -- --backend cpu --cache-type f32 2>&1 | tee -a $OUT/goldens.txt
echo "== CUDA refuses gpt-oss by name (expected: an error naming --backend cpu)"
tiny=$(mktemp -d)/tiny-gpt-oss-mxfp4-q8_0.gguf
$B synth --recipe $G/tiny-gpt-oss.recipe.json --type mxfp4_moe -o $tiny > /dev/null 2>&1
$B logits -m $tiny --tokens "1 2 3" --backend cuda 2>&1 | tail -1

echo "== gpt-oss-20b (mxfp4_moe) in llama-bench"
F=$M/gpt-oss-20b-mxfp4_moe.gguf
[ -f $F ] || timeout 300 $B synth --preset gpt-oss-20b --type mxfp4_moe -o $F 2>&1 | tail -1
ls -l $F
timeout 240 $L/llama-bench -m $F -ngl 99 -fa 1 -p 2048 -n 128 -r 1 2>&1 | tail -6 | tee $OUT/llama-bench.txt
$B inspect $F 2>&1 | head -20
