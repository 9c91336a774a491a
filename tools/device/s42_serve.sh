#!/bin/bash
# Issue 16's HTTP bar under session 42's server (writes under $OUT): serve_load.sh on qwen3-8b
# with a BPE vocabulary (64 streamed requests beside bench -npl 64) with the picks' text
# streamed beside the next pass (the default), then with --no-stream-overlap (SERVE_ARGS);
# SWITCHES (say "FERROLM_F16_DECODE_DEEP=1 FERROLM_F16_DECODE_PAIR=1") for both servers and
# benches. The openai client's wheels (Python 3.12) from target/wheels, installed into
# /tmp/site. On a warm machine after s42_first.sh (its binary in target/dev-bin). Usage, from
# the repo root:
#   [SWITCHES=...] [ONE=1] bash tools/device/s42_serve.sh   (ONE: the default server only)
source tools/device/carried.sh
serve_setup
for args in "" "--no-stream-overlap"; do
  [ -n "$args" ] && [ -n "$ONE" ] && break
  echo "== serve $args ${SWITCHES:-} at $(( $(date +%s) - t0 )) s"
  bench=1; [ -n "$args" ] && bench=0
  env ${SWITCHES:-A=0} SERVE_ARGS="$args" BENCH=$bench timeout 280 bash tools/device/serve_load.sh $B $Q 2>&1 |
    tee -a $OUT/serve_load.txt | grep -vE '^\s*$' | cut -c1-400
done
echo "end at $(( $(date +%s) - t0 )) s"
