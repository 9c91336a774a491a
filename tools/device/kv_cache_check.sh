#!/bin/bash
# The quantized KV cache (-ctk/-ctv q8_0, q4_0) on the GPU machine, within one device call:
#   1. cuda-parity: the q8_0/q4_0 store against ferrolm_quant's blocks (bit-identical), and
#      flash-decoding and the scalar prefill over each against the CPU's attention over a cache
#      of the same type (its f32 path and its ggml one-chunk path);
#   2. the goldens of goldens/kv-cache (llama.cpp with a q8_0 or q4_0 cache, flash attention) on
#      CUDA with the same -ctk/-ctv, the bars of golden_tiny.rs, and on this machine's CPU;
#   3. decode steps against a batched pass, and the f16 cache, on the same tokens (argmax).
# Usage on the GPU machine, from the repo root (writes under $OUT):
#   bash tools/device/kv_cache_check.sh BIN_DIR GOLDEN_DIR
B=$1/ferrolm
G=$2
T=$(dirname "$0")
K=goldens/kv-cache
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
OUT=${OUT:-/tmp}

echo "== cuda-parity (quantized cache rows)"
timeout 300 $B cuda-parity --seed 21 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "hadamard|kv_store f32→q|attn_(decode|prefill) q" $OUT/parity.txt

for t in q8_0 q4_0; do
  stems=$(cd $K && ls *-kv$t.json.gz | sed 's/\.json\.gz$//' | tr '\n' ' ')
  for b in cuda cpu; do
    echo "== goldens, --backend $b -ctk $t -ctv $t"
    GOLDEN_MODELS=$G python3 $T/golden_check.py $B $K $stems -- --backend $b -ctk $t -ctv $t 2>&1 | tee -a $OUT/kv_goldens.txt
  done
done

echo "== CUDA against the CPU, q8_0 cache, 300 tokens batched and 40 stepped (argmax agreement)"
toks=$(python3 -c "print(' '.join(str(i * 7 % 509) for i in range(300)))")
for m in tiny-llama-q8_0 tiny-qwen3moe-q4_k_m tiny-olmoe-q8_0; do
  for mode in "" --step; do
    t=$toks; [ -n "$mode" ] && t=$(echo $toks | cut -d' ' -f1-40)
    $B logits -m $G/$m.gguf --backend cuda --all --tokens "$t" -ctk q8_0 -ctv q8_0 $mode > /tmp/$m-gpu.json
    $B logits -m $G/$m.gguf --backend cpu --all --tokens "$t" -ctk q8_0 -ctv q8_0 $mode > /tmp/$m-cpu.json
    python3 - /tmp/$m-gpu.json /tmp/$m-cpu.json "$m ${mode:-batched}" <<'PY'
import json, sys
import numpy as np
a, b = (np.array(json.load(open(p))["logits"]) for p in sys.argv[1:3])
agree = (a.argmax(1) == b.argmax(1)).mean()
print(f"{sys.argv[3]}: rows {len(a)}, max |d| {np.abs(a - b).max():.3e}, top-1 agreement {agree:.3f}")
PY
  done
done
