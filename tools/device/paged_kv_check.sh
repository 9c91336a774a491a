#!/bin/bash
# The paged KV cache on the GPU machine (issue 16), within one device call: cuda-parity (every
# store and attention kernel over caches whose blocks are listed in reverse, against the CPU);
# the engine's GPU tests of paging (block sizes change no bits; a shared pool's prefix sharing
# and copy on write bit-identical to caches of their own; a full pool is an error), given as
# the `cuda_paths` test binary in BIN_DIR; FERROLM_KV_BLOCK=16 and 65536 against the default
# through `ferrolm logits` (bit-identical, one sequence's steps and a batched prompt); the
# goldens on CUDA, with f16, q8_0 and q4_0 caches.
# Usage on the GPU machine, from the repo root (writes under $OUT):
#   bash tools/device/paged_kv_check.sh BIN_DIR GOLDEN_DIR
# GOLDEN_DIR: tiny-llama-q4_k_m, tiny-olmoe-q4_k_m and tiny-qwen3-q8_0 of ../shared/golden.
B=$1; G=$2
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
echo "== cuda-parity"
timeout 280 $B/ferrolm cuda-parity --seed 17 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "FAIL" $OUT/parity.txt | head -20
grep -ciE "kv_store|attn_" $OUT/parity.txt
echo "== engine GPU tests (cuda_paths: paging, shared pool, batched attention)"
FERROLM_GOLDEN_DIR=$(realpath $G) timeout 200 $B/cuda_paths --ignored --test-threads 1 kv_block shared_pool batched_decode_attention 2>&1 | tail -25
echo "== KV block switch through the CLI (bit-identical logits)"
toks=$(seq -s ' ' 3 2 400) # 199 tokens: 4 blocks of 64, 13 of 16
for m in tiny-llama-q4_k_m tiny-olmoe-q4_k_m tiny-qwen3-q8_0; do
  for blk in 64 16 65536; do
    FERROLM_KV_BLOCK=$blk $B/ferrolm logits -m $G/$m.gguf --backend cuda --all --tokens "$toks" --step > /tmp/$m-s$blk.json 2>/dev/null
    FERROLM_KV_BLOCK=$blk $B/ferrolm logits -m $G/$m.gguf --backend cuda --all --tokens "$toks" > /tmp/$m-b$blk.json 2>/dev/null
  done
  for blk in 16 65536; do
    python3 tools/device/same_logits.py /tmp/$m-s64.json /tmp/$m-s$blk.json
    python3 tools/device/same_logits.py /tmp/$m-b64.json /tmp/$m-b$blk.json
  done
done
echo "== goldens on CUDA"
timeout 150 python3 tools/device/golden_check.py $B/ferrolm $G tiny-llama-q4_k_m tiny-olmoe-q4_k_m tiny-qwen3-q8_0 -- --backend cuda 2>&1 | tail -8
echo "== kv-cache goldens (q8_0/q4_0 caches) on CUDA"
for t in q8_0 q4_0; do
  GOLDEN_MODELS=$(realpath $G) timeout 60 python3 tools/device/golden_check.py $B/ferrolm goldens/kv-cache tiny-llama-q4_k_m-kv$t tiny-olmoe-q4_k_m-kv$t -- --backend cuda -ctk $t -ctv $t 2>&1 | tail -4
done
echo done
