#!/bin/bash
# Batched decode side by side with llama.cpp (issue 16), in one device call: for each preset,
# the same `synth --type q4_k_m` file to llama-batched-bench and to `ferrolm bench`'s batched
# mode (-npp 128 -ntg 128 -npl $NPL, both with -c $C so that no B is skipped), ferrolm under
# each setting of an A/B switch (default: the one-launch batched attention on and off).
# Run on the GPU machine from the repo root; llama.cpp unpacked under LLAMA_BIN.
#   bash tools/device/batched_bench.sh BIN_DIR LLAMA_BIN PRESET...
#   e.g. bash tools/device/batched_bench.sh target/ba target/anchor/bin olmoe-1b-7b qwen3-8b
# NPL=1,8,32,64 (default), C=40000 (default), AB="FERROLM_X=1 FERROLM_X=0" override.
B=$1/ferrolm
L=$2
shift 2
NPL=${NPL:-1,8,32,64}
C=${C:-40000}
AB=${AB:-"FERROLM_ATTN_BATCHED=1 FERROLM_ATTN_BATCHED=0"}
M=target/device-models # ignored: stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M
for p in "$@"; do
  [ -s $M/$p.gguf ] || $B synth --preset $p --type q4_k_m -o $M/$p.gguf > /dev/null 2>&1
  echo "== $p llama.cpp llama-batched-bench"
  timeout 240 $L/llama-batched-bench -m $M/$p.gguf -ngl 99 -fa 1 -c $C -npp 128 -ntg 128 \
    -npl $NPL 2>&1 | grep -E '^\|'
  for setting in $AB; do
    echo "== $p ferrolm $setting"
    env $setting timeout 240 $B bench -m $M/$p.gguf --backend cuda -c $C -npp 128 -ntg 128 \
      -npl $NPL 2>&1 | grep -E '^\||error'
  done
done
