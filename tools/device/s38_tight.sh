#!/bin/bash
# Session 38: FERROLM_MOE_TIGHT (the lean MoE kernels of one token in four blocks an SM) by
# its bits (1 gate/up, 2 down, 3 both), beside the default and llama-bench (tools/device/
# s38_sweep.sh), each setting's logits one token a step against the default's, then
# cuda-parity with the tight entries and the bulk L2 requests on. Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz: bash tools/device/s38_tight.sh
DEPTH=${DEPTH:-0} SWITCHES=${SWITCHES:-"FERROLM_MOE_TIGHT=1 FERROLM_MOE_TIGHT=2 FERROLM_MOE_TIGHT=3 FERROLM_MOE_DOWN_EARLY=0"} \
  bash tools/device/s38_sweep.sh
source tools/device/carried.sh > /dev/null
toks=$(seq -s ' ' 3 7 250)
for P in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf
  $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/a.json 2> /dev/null
  for S in FERROLM_MOE_TIGHT=3 FERROLM_MOE_DOWN_EARLY=0; do
    env $S $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/b.json 2> /dev/null
    echo -n "$P $S / default: "; python3 $T/same_logits.py /tmp/b.json /tmp/a.json
  done
done
( export FERROLM_MOE_TIGHT=3 FERROLM_MOE_BULK_L2=1; run_parity ${SEED:-175} )
