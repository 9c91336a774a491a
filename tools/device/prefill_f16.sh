#!/bin/bash
# Prefill on the f16 wgmma GEMM against llama.cpp and against the int8 GEMMs, same file, same
# call (issue 17; docs/perf.md "Issue 17: the f16 warpgroup-MMA GEMM"). Run on the GPU machine
# from the repo root:
#   bash tools/device/prefill_f16.sh BIN LLAMA_BIN_DIR PRESET...   (e.g. olmoe-1b-7b qwen3-8b)
# PP (default 512,2048) sets the prompt sizes; PARITY=1 runs cuda-parity first.
BIN=$(readlink -f "$1")
L=$2
shift 2
PP=${PP:-512,2048}
M=target/device-models # ignored: stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M
if [ "${PARITY:-0}" = 1 ]; then
  $BIN cuda-parity > /tmp/parity.txt 2> /tmp/parity.err
  echo "cuda-parity rc=$?: $(tail -n1 /tmp/parity.err)"
  grep -E "f16|FAIL" /tmp/parity.txt | cut -c1-160
fi
for p in "$@"; do
  [ -f $M/$p.gguf ] || $BIN synth --preset $p --type q4_k_m -o $M/$p.gguf > /dev/null
  echo "== $p"
  $L/llama-bench -m $M/$p.gguf -ngl 99 -fa 1 -ub 512,2048 -p $PP -n 0 -r 2 2> /dev/null | grep pp
  for f in 1 0; do
    echo "FERROLM_GEMM_F16=$f"
    FERROLM_GEMM_F16=$f $BIN bench --backend cuda -m $M/$p.gguf -p $PP -n 0 --ubatch-size 2048 -r 2 2> /dev/null | grep pp
  done
done
