#!/bin/bash
# Written after session 38's last device call, as the next session's first: FERROLM_MOE_H_IN_DOWN
# (each MoE down block quantizes h to Q8_K into its own shared memory, in place of
# quantize_q8_k's launch). cuda-parity with it on (the MoE decode rows compare the plan's path,
# then with it, against the per-slot path and the flipped-switch row bit for bit), the logits one
# token a step on and off (pooled OLMoE and qwen3-30b-a3b), then tg128 beside llama-bench with
# it alone and with the tight gate/up. Usage, from the repo root, .device-carry/ holding
# ferrolm.xz and llama.tar.xz:  bash tools/device/s39_next.sh
source tools/device/carried.sh
( export FERROLM_MOE_H_IN_DOWN=1; run_parity ${SEED:-177} )
pooled olmoe-1b-7b qwen3-30b-a3b
toks=$(seq -s ' ' 3 7 250)
for P in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf
  $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/a.json 2> /dev/null
  FERROLM_MOE_H_IN_DOWN=1 $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/b.json 2> /dev/null
  echo -n "$P FERROLM_MOE_H_IN_DOWN=1 / default: "; python3 $T/same_logits.py /tmp/b.json /tmp/a.json
done
DEPTH=0 SWITCHES="FERROLM_MOE_H_IN_DOWN=1 FERROLM_MOE_H_IN_DOWN=1,FERROLM_MOE_TIGHT=3" bash $T/s38_sweep.sh | grep -v NVIDIA
