#!/bin/bash
# Issue 16's HTTP bar after session 41's defaults (writes under $OUT): serve_load.sh on qwen3-8b
# with a BPE vocabulary (64 streamed requests beside bench -npl 64), the openai client's wheels
# (Python 3.12) from target/wheels, installed into /tmp/site. On a warm machine after
# s41_bars.sh (its binary in target/dev-bin). Usage, from the repo root:
#   bash tools/device/s41_serve.sh
source tools/device/carried.sh
serve_setup
timeout 400 bash tools/device/serve_load.sh $B $Q 2>&1 | tee $OUT/serve_load.txt |
  grep -vE '^\s*$' | cut -c1-400
echo "end at $(( $(date +%s) - t0 )) s"
