#!/bin/bash
# The switches written after session 37's last device call, as the next session's first call:
# FERROLM_ATTN_ROPE_ROWS (OLMoE's whole-row q/k norms in the group walk, its row sums with
# every load first) and FERROLM_ATTN_HEAD_SPLIT (the rotating tensor-core walk's groups of 8
# query heads in two blocks of 4). cuda-parity (the rotating walks' rows among all), the logits
# one token a step with each switch on and off (pooled OLMoE, qwen3-30b-a3b), then tg128 beside
# llama-bench, default / switch, two rounds. Usage, from the repo root, .device-carry/ holding
# ferrolm.xz and llama.tar.xz:  bash tools/device/s37_next.sh
source tools/device/carried.sh
run_parity ${SEED:-174}
echo "rotating walk rows: $(grep -c '_rope' $OUT/parity.txt), failing $(grep '_rope' $OUT/parity.txt | grep -c FAIL)"
pooled olmoe-1b-7b qwen3-30b-a3b
toks=$(seq -s ' ' 3 7 250)
for run in olmoe-1b-7b,FERROLM_ATTN_ROPE_ROWS=1 qwen3-30b-a3b,FERROLM_ATTN_HEAD_SPLIT=1; do
  P=${run%%,*}; S=${run#*,}; F=$M/$P-pooled.gguf
  $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/a.json 2> /tmp/a.err ||
    tail -3 /tmp/a.err
  env $S $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/b.json 2> /dev/null
  echo -n "$P $S / default: "; python3 $T/same_logits.py /tmp/b.json /tmp/a.json
  tg() { timeout 60 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
  echo "== $P llama-bench: $(timeout 100 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  for round in 1 2; do
    echo "== $P round $round: default $(tg A=0) / $S $(tg $S) at $(( $(date +%s) - t0 )) s"
  done
done
