#!/bin/bash
# Issue 16: a pass's logits through a kept page-locked buffer (session 24; FERROLM_PINNED_LOGITS, on by default
# since session 25 measured it with this script), one device call (writes under $OUT): the switch's contract
# (the same bytes through the CLI, on shape-space models synthesized here), the `to_host` stage
# of a 64-sequence qwen3-8b step with and without it, llama-batched-bench beside `ferrolm
# bench`'s batched mode both ways (qwen3-8b, olmoe-1b-7b), one sequence's tg128 both ways, and,
# where .device-carry/wheels holds the openai client's wheels (Python 3.12), issue 16's HTTP
# bar on a dense model (serve_load.sh on qwen3-8b with a BPE vocabulary) with it on. The
# binary, llama.cpp's archive and the wheels may not fit one call's 64 MiB with the tree:
# carry the wheels in a next call (the BPE file is made in this one and kept while warm).
# Usage, from the repo root, .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   bash tools/device/pinned_logits_check.sh
source tools/device/carried.sh
( [ -s $M/qwen3-8b.gguf ] || $B synth --preset qwen3-8b --type q4_k_m -o $M/qwen3-8b.gguf > $OUT/synth-q.txt 2>&1
  [ -s $M/olmoe-1b-7b.gguf ] || $B synth --preset olmoe-1b-7b --type q4_k_m -o $M/olmoe-1b-7b.gguf > $OUT/synth-o.txt 2>&1 ) &
SP=$!
# The HTTP run's file, made now for a next call on the warm machine where the wheels did not fit.
( [ -s $M/qwen3-8b-bpe.gguf ] || $B synth --preset qwen3-8b --type q4_k_m --vocab bpe -o $M/qwen3-8b-bpe.gguf > $OUT/synth-qb.txt 2>&1 ) &
[ -d $D/wheels ] && python3 -m pip install --quiet --no-index --find-links $D/wheels --target /tmp/site openai > /dev/null 2>&1
echo "== switch contract"
S=goldens/shape-space; G=/tmp/rs; mkdir -p $G
$B synth --recipe $S/llama-d320-h64-gqa5-tied.recipe.json --type q8_0 -o $G/llama.gguf > /dev/null 2>&1
$B synth --recipe $S/qwen3moe-d256-h128-gqa4-e12k5.recipe.json --type q4_k_m -o $G/qwen3moe.gguf > /dev/null 2>&1
$B synth --recipe $S/olmoe-d320-h64-e12k5.recipe.json --type q4_k_m -o $G/olmoe.gguf > /dev/null 2>&1
$B synth --recipe goldens/gpt-oss/tiny-gpt-oss.recipe.json --type mxfp4_moe -o $G/gptoss.gguf > /dev/null 2>&1
bash $T/switch_same.sh $B $G "FERROLM_PINNED_LOGITS=1" "FERROLM_PINNED_LOGITS=0" llama qwen3moe olmoe gptoss
wait; ls -l $M
for s in 1 0; do
  echo "== qwen3-8b stages, 64 sequences, FERROLM_PINNED_LOGITS=$s"
  FERROLM_PINNED_LOGITS=$s FERROLM_CUDA_PROFILE=1 timeout 120 $B bench -m $M/qwen3-8b.gguf --backend cuda \
    -c 4096 -npp 16 -ntg 16 -npl 64 2>&1 | grep -E 'to_host|matmul|gate_up|wall|^\|' | head -12
done
for p in qwen3-8b olmoe-1b-7b; do
  echo "== $p llama-batched-bench"
  timeout 120 $L/llama-batched-bench -m $M/$p.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\|'
  for s in 1 0; do
    echo "== $p ferrolm FERROLM_PINNED_LOGITS=$s"
    FERROLM_PINNED_LOGITS=$s timeout 100 $B bench -m $M/$p.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\||rror|panic'
  done
done
for s in 1 0; do
  echo "== qwen3-8b tg128, FERROLM_PINNED_LOGITS=$s"
  FERROLM_PINNED_LOGITS=$s timeout 60 $B bench -m $M/qwen3-8b.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -1
done
timeout 60 $L/llama-bench -m $M/qwen3-8b.gguf -ngl 99 -fa 1 -p 0 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -1
if [ -d $D/wheels ]; then
  echo "== serve: 64 streamed requests, qwen3-8b BPE, FERROLM_PINNED_LOGITS=1"
  FERROLM_PINNED_LOGITS=1 PYTHONPATH=/tmp/site timeout 200 bash $T/serve_load.sh $B $M/qwen3-8b-bpe.gguf 2>&1 | tail -16
fi
echo done
