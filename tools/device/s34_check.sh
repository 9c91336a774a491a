#!/bin/bash
# Session 34's router launch on one thread-block cluster and the experts' down weights asked of
# L2 by the gate/up kernel, in one call (writes under $OUT): cuda-parity (their rows:
# "add_rms_norm_route_cluster", "down prefetch"), then tg128 of qwen3-30b-a3b and olmoe-1b-7b
# beside llama-bench with FERROLM_NORM_ROUTE_CLUSTER on / off / on, then
# FERROLM_MOE_DOWN_PREFETCH=0 and both off, and the
# router's cost in the chain with it (tools/device/chain_costs.sh's two rows). Pooled synth
# files. Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
# [PARITY=0] [SEED=n] bash tools/device/s34_check.sh (with goldens/shape-space beside it, when
# carried, its goldens one token a step on CUDA)
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b
if [ "${PARITY:-1}" = 1 ]; then
  run_parity ${SEED:-157}
  for r in route_cluster 'down prefetch'; do
    echo "rows '$r': $(grep -c "$r" $OUT/parity.txt), passing: $(grep "$r" $OUT/parity.txt | grep -c '| PASS |')"
  done
fi
if [ -d goldens/shape-space ]; then
  # The tiny shape-space models one token a step on CUDA (their MoE routers on the cluster,
  # their down weights prefetched), against llama.cpp's logits.
  timeout 150 python3 $T/golden_check.py $B goldens/shape-space -- --backend cuda --step > $OUT/golden.txt 2>&1
  echo "shape-space step: rc=$? PASS $(grep -c '^PASS' $OUT/golden.txt), FAIL $(grep -c '^FAIL' $OUT/golden.txt)"
  grep '^FAIL' $OUT/golden.txt | head
fi
tg() { timeout 90 $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
for P in qwen3-30b-a3b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  echo "== $P ferrolm, cluster on / off / on: $(tg) / $(FERROLM_NORM_ROUTE_CLUSTER=0 tg) / $(tg)"
  echo "== $P ferrolm, down prefetch off / both off: $(FERROLM_MOE_DOWN_PREFETCH=0 tg) / $(FERROLM_MOE_DOWN_PREFETCH=0 FERROLM_NORM_ROUTE_CLUSTER=0 tg)"
  E=moe_gate_up,quantize_q8_k,moe_down
  echo "$P without the experts / the router and experts: $(FERROLM_TIMING_SKIP=$E tg) / $(FERROLM_TIMING_SKIP=add_rms_norm_route,$E tg)"
done
echo "end at $(( $(date +%s) - t0 )) s"
