#!/bin/bash
# The quantized KV cache (-ctk/-ctv q8_0, q4_0) on the GPU machine, within one device call:
#   1. cuda-parity: the q8_0/q4_0 store against ferrolm_quant's blocks (bit-identical), and
#      flash-decoding and the scalar prefill over each against the CPU's attention over a cache
#      of the same type (its f32 path and its ggml one-chunk path);
#   2. the goldens of goldens/kv-cache (llama.cpp with a q8_0 or q4_0 cache, flash attention) on
#      CUDA with the same -ctk/-ctv, the bars of golden_tiny.rs, and on this machine's CPU;
#   3. decode steps against a batched pass, and the f16 cache, on the same tokens (argmax).
# With a third argument `f32`, the f32 cache (--cache-type f32, llama.cpp's precise
# configuration) instead:
#   1. cuda-parity's "attention f32 cache" rows: the store (bit-identical), flash-decoding (one
#      split and the plan's), the scalar and CPU-order prefills, with a window, sinks and
#      kq_scale, against the CPU over an f32 cache (≤ 1e-5 rel; the CPU-order prefill 1e-6);
#   2. every golden made with llama.cpp's F32 KV cache (its `reference` says so: the F32 files
#      of ../shared/golden and goldens/{deepseek2,gemma3,gpt-oss,llama-family,shape-space}) on
#      CUDA with --cache-type f32, the bars of golden_tiny.rs (F32 files max |dlogit| <= 2e-2).
# Usage on the GPU machine, from the repo root (writes under $OUT):
#   bash tools/device/kv_cache_check.sh BIN_DIR GOLDEN_DIR [f32]
B=$1/ferrolm
G=$2
T=$(dirname "$0")
K=goldens/kv-cache
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
OUT=${OUT:-/tmp}

if [ "$3" = f32 ]; then
  echo "== cuda-parity (f32 cache rows)"
  timeout 300 $B cuda-parity --seed 21 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
  grep -E "kv_store f32→f32|attn_(decode|prefill) f32" $OUT/parity.txt
  echo "f32 cache rows failing: $(grep -E 'f32→f32|attn_(decode|prefill) f32' $OUT/parity.txt | grep -c '| FAIL |')"
  echo "rows failing (all): $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head -20
  # The stems of DIR whose golden was made with llama.cpp's F32 KV cache.
  f32_stems() {
    python3 - "$1" <<'PY'
import glob, gzip, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json*"))):
    d = json.load(gzip.open(f) if f.endswith(".gz") else open(f))
    if isinstance(d, dict) and "F32 KV cache" in d.get("reference", ""):
        print(os.path.basename(f).split(".json")[0])
PY
  }
  for d in $G goldens/deepseek2 goldens/gemma3 goldens/gpt-oss goldens/llama-family goldens/shape-space; do
    stems=$(f32_stems $d | tr '\n' ' ')
    [ -z "$stems" ] && continue
    echo "== $d, --backend cuda --cache-type f32: $stems"
    timeout 240 python3 $T/golden_check.py $B $d $stems -- --backend cuda --cache-type f32 2>&1 | tee -a $OUT/f32_goldens.txt
  done
  exit 0
fi

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
