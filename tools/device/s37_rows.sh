#!/bin/bash
# FERROLM_ATTN_ROPE_ROWS (OLMoE's whole-row q/k norms in the group walk) with its row sums'
# loads all ahead of the sums: cuda-parity (its attn_decode_group_rope_row rows among all),
# OLMoE's logits one token a step with the switch on and off, tg128 off / on beside
# llama-bench. Usage, from the repo root, .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   bash tools/device/s37_rows.sh
source tools/device/carried.sh
run_parity ${SEED:-174}
echo "rotating walk rows: $(grep -c '_rope' $OUT/parity.txt), failing $(grep '_rope' $OUT/parity.txt | grep -c FAIL)"
pooled olmoe-1b-7b
F=$M/olmoe-1b-7b-pooled.gguf
toks=$(seq -s ' ' 3 7 250)
$B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/on.json 2> /tmp/on.err ||
  tail -3 /tmp/on.err
FERROLM_ATTN_ROPE_ROWS=1 $B logits -m $F --backend cuda --all --tokens "$toks" --step \
  > /tmp/rows.json 2> /dev/null
echo -n "olmoe FERROLM_ATTN_ROPE_ROWS=1 / default: "; python3 $T/same_logits.py /tmp/rows.json /tmp/on.json
tg() { timeout 60 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
echo "== llama-bench: $(timeout 60 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
for round in 1 2; do
  echo "== round $round: default $(tg A=0) / FERROLM_ATTN_ROPE_ROWS=1 $(tg FERROLM_ATTN_ROPE_ROWS=1) at $(( $(date +%s) - t0 )) s"
done
