#!/bin/bash
# (Run in session 46; FERROLM_MOE_MMA_ONE was taken out after it: docs/perf.md, session 46.)
# For the session after 45: FERROLM_MOE_MMA_ONE (one token's experts on the batched steps'
# tensor-core mat-vec, moe_mma.cu, where the one-token decode kernels' wide dp4a walk runs;
# written in session 45, never run). In order: OLMoE's and qwen3-30b-a3b's logits over 60 steps
# one token a step with and without it (not the same bits: the tensor-core contract; the
# script prints both md5s and the largest difference against the default's logits); tg128
# beside llama-bench, default / MMA_ONE / default / MMA_ONE; then, where it runs, what its
# launches cost the chain (FERROLM_TIMING_SKIP of moe_mma, and of the decode kernels without
# it). Usage, from the repo root, .device-carry/ from tools/device/pack.sh:
#   bash tools/device/s46_first.sh
source tools/device/carried.sh
ONE=FERROLM_MOE_MMA_ONE=1
toks=$(seq -s ' ' 11 70)
pooled olmoe-1b-7b qwen3-30b-a3b
for p in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$p-pooled.gguf
  timeout 60 $B logits -m $F --backend cuda --all --step --tokens "$toks" > /tmp/a.json 2> /tmp/a.err
  env $ONE timeout 60 $B logits -m $F --backend cuda --all --step --tokens "$toks" > /tmp/b.json 2> /tmp/b.err
  echo "logits $p default $(md5sum < /tmp/a.json | cut -c1-8) mma-one $(md5sum < /tmp/b.json | cut -c1-8) $(tail -1 /tmp/b.err)"
  python3 $T/same_logits.py /tmp/b.json /tmp/a.json
done
for run in "qwen3-30b-a3b" "olmoe-1b-7b"; do
  F=$M/$run-pooled.gguf; EXTRA=
  echo "== $run llama-bench $(llama_tg128) default $(tg128 A=0) mma-one $(tg128 $ONE) default $(tg128 A=0) mma-one $(tg128 $ONE) at $(( $(date +%s) - t0 )) s"
  echo "== $run chain: no moe_gate_up,quantize_q8_k,moe_down $(tg128 FERROLM_TIMING_SKIP=moe_gate_up,quantize_q8_k,moe_down) / mma-one without moe_mma $(tg128 $ONE FERROLM_TIMING_SKIP=moe_mma)"
done
echo "end at $(( $(date +%s) - t0 )) s"
