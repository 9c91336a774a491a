#!/bin/bash
# Decode side by side with llama.cpp (issue 15), in one device call: for each preset, the same
# `synth --type q4_k_m` file to llama-bench and to `ferrolm bench`, tg128 at depth 0 and at the
# depths given, ferrolm with an A/B switch alternated (default: FERROLM_CUDA_PDL=1 vs 0).
# Run on the GPU machine from the repo root; llama.cpp unpacked under $LLAMA (the bin folder).
#   bash tools/device/decode_bench.sh BIN_DIR LLAMA_BIN "DEPTHS" PRESET...
#   e.g. bash tools/device/decode_bench.sh target/ba target/anchor/bin "0,16384" olmoe-1b-7b
# AB="FERROLM_X=1 FERROLM_X=0" overrides the two settings compared.
B=$1/ferrolm
L=$2
DEPTHS=$3
shift 3
AB=${AB:-"FERROLM_CUDA_PDL=1 FERROLM_CUDA_PDL=0"}
M=target/device-models # ignored: stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M
for p in "$@"; do
  [ -s $M/$p.gguf ] || $B synth --preset $p --type q4_k_m -o $M/$p.gguf > /dev/null 2>&1
  echo "== $p llama.cpp (-d $DEPTHS)"
  timeout 200 $L/llama-bench -m $M/$p.gguf -ngl 99 -fa 1 -p 0 -n 128 -d $DEPTHS -r 3 2>&1 |
    grep -E '^\|' | tail -n +3
  for round in 1 2; do
    for setting in $AB; do
      echo "== $p ferrolm $setting (round $round)"
      env $setting timeout 200 $B bench -m $M/$p.gguf --backend cuda -p 0 -n 128 -d $DEPTHS -r 3 \
        2>&1 | grep -E '^\| .*tg'
    done
  done
done
