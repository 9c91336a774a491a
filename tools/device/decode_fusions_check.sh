#!/bin/bash
# Issue 19's decode fusions on the GPU machine, in one device call (session 22; writes under
# $OUT): cuda-parity, goldens one token a step, the switches' same-logits checks, then
# gpt-oss-20b (mxfp4_moe) and olmoe-1b-7b (q4_k_m) in llama-bench and ferrolm bench, and the
# per-token kernel table. Usage, from the repo root, with .device-carry/ holding ferrolm.xz
# (the stripped release binary, xz-compressed) and llama.tar.xz (../shared/bench's archive):
#   bash tools/device/decode_fusions_check.sh
source tools/device/carried.sh
ls -l $M
( [ -f $M/g.gguf ] || timeout 200 $B synth --preset gpt-oss-20b --type mxfp4_moe -o $M/g.gguf > $OUT/synth-g.txt 2>&1
  [ -f $M/o.gguf ] || timeout 120 $B synth --preset olmoe-1b-7b --type q4_k_m -o $M/o.gguf > $OUT/synth-o.txt 2>&1 ) &
SP=$!
echo "== parity"
timeout 300 $B cuda-parity --seed 79 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -iE "q8_0" $OUT/parity.txt | grep -E "mmvq|pair|glu" | head -40
echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
echo "== goldens on CUDA, one token a step"
S=goldens/shape-space
timeout 150 python3 $T/golden_check.py $B $S -- --backend cuda --step 2>&1 | sed "s/^/shape-space step: /"
timeout 60 python3 $T/golden_check.py $B goldens/gpt-oss tiny-gpt-oss-mxfp4-q8_0 -- --backend cuda --step 2>&1 | sed "s/^/gpt-oss step: /"
timeout 60 python3 $T/golden_check.py $B goldens/gpt-oss tiny-gpt-oss-mxfp4-f32 -- --backend cuda --cache-type f32 --step 2>&1 | sed "s/^/gpt-oss f32 step: /"
timeout 90 python3 $T/golden_check.py $B goldens/gemma3 -- --backend cuda --step 2>&1 | sed "s/^/gemma3 step: /"
echo "== the switches: same logits, one token a step"
toks=$(seq -s ' ' 3 7 250)
$B synth --recipe $S/olmoe-d320-h64-e12k5.recipe.json --type q4_k_m -o /tmp/m1.gguf > /dev/null 2>&1
$B synth --recipe $S/qwen3moe-d256-h128-gqa4-e12k5.recipe.json --type q8_0 -o /tmp/m2.gguf > /dev/null 2>&1
$B synth --recipe goldens/gpt-oss/tiny-gpt-oss.recipe.json --type mxfp4_moe -o /tmp/m3.gguf > /dev/null 2>&1
$B synth --recipe $S/llama-d320-h64-gqa5-tied.recipe.json --type q8_0 -o /tmp/m4.gguf > /dev/null 2>&1
for m in m1 m2 m3 m4; do
  $B logits -m /tmp/$m.gguf --backend cuda --all --tokens "$toks" --step > /tmp/$m-on.json 2>/tmp/$m-on.err || tail -3 /tmp/$m-on.err
  for sw in FERROLM_NORM_ROUTE=0 FERROLM_CUDA_GRAPH=0; do
    env $sw $B logits -m /tmp/$m.gguf --backend cuda --all --tokens "$toks" --step > /tmp/$m-off.json 2>/dev/null
    echo -n "$m $sw: "; python3 $T/same_logits.py /tmp/$m-on.json /tmp/$m-off.json
  done
  FERROLM_MMVQ_WIDE=0 $B logits -m /tmp/$m.gguf --backend cuda --all --tokens "$toks" --step > /tmp/$m-off.json 2>/dev/null
  echo -n "$m FERROLM_MMVQ_WIDE=0: "; python3 $T/same_logits.py /tmp/$m-on.json /tmp/$m-off.json 0.2
done
wait $SP; ls -l $M
echo "== gpt-oss-20b"
for r in 1 2; do
timeout 60 $L/llama-bench -m $M/g.gguf -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -1
timeout 60 $B bench -m $M/g.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 | grep -E '^\||error' | tail -1
done
FERROLM_MMVQ_WIDE=0 timeout 60 $B bench -m $M/g.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 | grep -E '^\||error' | tail -1 | sed 's/^/MMVQ_WIDE=0: /'
timeout 150 $L/llama-bench -m $M/g.gguf -ngl 99 -fa 1 -p 2048 -n 0 -ub 2048 -r 2 2>&1 | grep -E '^\|' | tail -1
timeout 100 $B bench -m $M/g.gguf --backend cuda -p 2048 -n 0 --ubatch-size 2048 -r 2 2>&1 | grep -E '^\||error' | tail -1
echo "== olmoe-1b-7b"
timeout 60 $L/llama-bench -m $M/o.gguf -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -1
timeout 60 $B bench -m $M/o.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 | grep -E '^\||error' | tail -1
echo "== gpt-oss per-token kernels"
DIV=16 timeout 120 bash $T/profile.sh $B $M/g.gguf g "-p 0 -n 8"
