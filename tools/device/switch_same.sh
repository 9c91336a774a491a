#!/bin/bash
# A bit-identical switch's contract on the GPU: `ferrolm logits --backend cuda` gives the same
# bytes under two environments, on every golden file given, as a batch of 36 and of 300 tokens and
# one token a step (graph replay). Prints one line per run and `ALL SAME` or `DIFFER`.
#   bash tools/device/switch_same.sh BIN GOLDEN_DIR "ENV_A" "ENV_B" STEM...
#   e.g. bash tools/device/switch_same.sh target/ba/ferrolm g "FERROLM_CUDA_PDL=1" \
#        "FERROLM_CUDA_PDL=0" tiny-llama-q4_k_m tiny-olmoe-q8_0
BIN=$(readlink -f "$1")
G=$2
A=$3
B=$4
shift 4
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
T36=$(seq -s ' ' 3 7 250)
T300=$(for i in $(seq 0 299); do echo -n "$(((i * 37 + 5) % 512)) "; done)
status=0
for stem in "$@"; do
  for mode in b36 b300 step; do
    case $mode in
      b36) args=(--tokens "$T36") ;;
      b300) args=(--tokens "$T300") ;;
      step) args=(--tokens "$T36" --step) ;;
    esac
    ha=$(env $A $BIN logits -m $G/$stem.gguf --backend cuda --all -c 512 "${args[@]}" 2>&1 | sha256sum)
    hb=$(env $B $BIN logits -m $G/$stem.gguf --backend cuda --all -c 512 "${args[@]}" 2>&1 | sha256sum)
    if [ "$ha" = "$hb" ]; then
      echo "same   $stem $mode"
    else
      echo "DIFFER $stem $mode"
      status=1
    fi
  done
done
if [ $status = 0 ]; then echo "ALL SAME"; else echo "DIFFER"; fi
exit $status
