#!/bin/bash
# Issue 15: two decode fusions written in session 24 without a device, off by default until
# this runs: one sequence's KV store in the RoPE launch (FERROLM_ROPE_STORE=1) and one token's
# q, k and v in one launch (FERROLM_QKV_ONE=1). One device call (writes under $OUT):
# cuda-parity's rope_store and mmvq triple rows and every other, each switch's same logits
# (one token a step and a batch) on shape-space models of the three rotations (RoPE alone,
# per-head q/k norms, whole-row norms), tiny gpt-oss (Q8_0 with biases) and both cache types,
# goldens one token a step with both on, then tg128 of qwen3-8b, olmoe-1b-7b and smollm2-1.7b
# (synth q4_k_m) in llama-bench and ferrolm bench with each setting.
# Usage, from the repo root, .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   bash tools/device/launch_fusions_check.sh
source tools/device/carried.sh
( for p in qwen3-8b olmoe-1b-7b smollm2-1.7b; do
    [ -s $M/$p.gguf ] || $B synth --preset $p --type q4_k_m -o $M/$p.gguf > $OUT/synth-$p.txt 2>&1
  done ) &
SP=$!
echo "== parity"
timeout 300 $B cuda-parity --seed 89 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "rope_qk_store|qk_norm_rope_store|mmvq triple" $OUT/parity.txt | head -60
echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
echo "== the switch: same logits"
S=goldens/shape-space
mkdir -p /tmp/rs
$B synth --recipe $S/llama-d320-h64-gqa5-tied.recipe.json --type q8_0 -o /tmp/rs/llama.gguf > /dev/null 2>&1
$B synth --recipe $S/qwen3moe-d256-h128-gqa4-e12k5.recipe.json --type q4_k_m -o /tmp/rs/qwen3moe.gguf > /dev/null 2>&1
$B synth --recipe $S/olmoe-d320-h64-e12k5.recipe.json --type q4_k_m -o /tmp/rs/olmoe.gguf > /dev/null 2>&1
$B synth --recipe goldens/gpt-oss/tiny-gpt-oss.recipe.json --type mxfp4_moe -o /tmp/rs/gptoss.gguf > /dev/null 2>&1
bash $T/switch_same.sh $B /tmp/rs "FERROLM_ROPE_STORE=1" "FERROLM_ROPE_STORE=0" llama qwen3moe olmoe gptoss
bash $T/switch_same.sh $B /tmp/rs "FERROLM_QKV_ONE=1" "FERROLM_QKV_ONE=0" llama qwen3moe olmoe gptoss
toks=$(seq -s ' ' 3 7 250)
for m in llama qwen3moe; do
  for step in "" --step; do
    FERROLM_ROPE_STORE=1 $B logits -m /tmp/rs/$m.gguf --backend cuda -c 512 --all --cache-type f32 --tokens "$toks" $step > /tmp/rs/on.json 2>/dev/null
    $B logits -m /tmp/rs/$m.gguf --backend cuda -c 512 --all --cache-type f32 --tokens "$toks" $step > /tmp/rs/off.json 2>/dev/null
    echo -n "$m f32 cache $step: "; python3 $T/same_logits.py /tmp/rs/on.json /tmp/rs/off.json
  done
done
echo "== goldens on CUDA, one token a step, FERROLM_ROPE_STORE=1 FERROLM_QKV_ONE=1"
export FERROLM_ROPE_STORE=1 FERROLM_QKV_ONE=1
timeout 150 python3 $T/golden_check.py $B $S -- --backend cuda --step 2>&1 | sed "s/^/shape-space step: /"
timeout 90 python3 $T/golden_check.py $B goldens/gemma3 -- --backend cuda --step 2>&1 | sed "s/^/gemma3 step: /"
timeout 60 python3 $T/golden_check.py $B goldens/gpt-oss tiny-gpt-oss-mxfp4-q8_0 -- --backend cuda --step 2>&1 | sed "s/^/gpt-oss step: /"
unset FERROLM_ROPE_STORE FERROLM_QKV_ONE
wait $SP; ls -l $M
for p in qwen3-8b olmoe-1b-7b smollm2-1.7b; do
  echo "== $p tg128"
  timeout 60 $L/llama-bench -m $M/$p.gguf -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -1
  for s in "FERROLM_ROPE_STORE=0" "FERROLM_ROPE_STORE=1" "FERROLM_QKV_ONE=1" \
           "FERROLM_ROPE_STORE=1 FERROLM_QKV_ONE=1"; do
    env $s timeout 60 $B bench -m $M/$p.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 \
      | grep -E '^\||error' | tail -1 | sed "s/^/$s: /"
  done
  timeout 60 $L/llama-bench -m $M/$p.gguf -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -1
done
echo done
