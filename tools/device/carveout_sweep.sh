#!/bin/bash
# tg128 under FERROLM_CUDA_CARVEOUT values (every kernel's preferred shared-memory carveout,
# percent; "auto": the driver's choice a kernel), two interleaved rounds, on the pooled synth
# files of PRESETS (default: qwen3-30b-a3b olmoe-1b-7b). Kernels of different carveouts cannot
# share an SM, so PDL cannot overlap them. Usage, from the repo root, .device-carry/ holding
# ferrolm.xz: [PRESETS="..."] [VALUES="auto 0 14 ..."] bash tools/device/carveout_sweep.sh
source tools/device/carried.sh
PRESETS=${PRESETS:-"qwen3-30b-a3b olmoe-1b-7b"}
VALUES=${VALUES:-"auto 0 8 14 25 50"}
pooled $PRESETS
echo "models at $(( $(date +%s) - t0 )) s"
tg() { timeout 90 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in $PRESETS; do
  F=$M/$P-pooled.gguf
  for round in 1 2; do
    line="== $P round $round:"
    for v in $VALUES; do
      if [ $v = auto ]; then line="$line auto $(tg A=0) /"; else line="$line $v $(tg FERROLM_CUDA_CARVEOUT=$v) /"; fi
    done
    echo "$line at $(( $(date +%s) - t0 )) s"
  done
done
