#!/bin/bash
# Session 39: FERROLM_ATTN_NEXT_L2 (the rotating walk asks L2 for the next layer's first keys
# of each split once its own walk is done) at -d 16384 beside llama-bench, OLMoE and qwen3-8b;
# FERROLM_ATTN_ROW_STAGES=2 on OLMoE; then the logits one token a step with each on and off. Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz: [VALUES="64 128"] bash tools/device/s39_next_l2.sh
source tools/device/carried.sh
VALUES=${VALUES:-"128 -128 -256"}
pooled olmoe-1b-7b qwen3-8b qwen3-30b-a3b
tg() { timeout 120 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 $EXTRA 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
lb() { timeout 200 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 $EXTRA 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}'; }
for P in ${PRESETS:-olmoe-1b-7b qwen3-8b}; do
  F=$M/$P-pooled.gguf; EXTRA="-d 16384"
  echo "== $P d16384 llama-bench $(lb) ferrolm $(tg A=0) at $(( $(date +%s) - t0 )) s"
  [ $P = qwen3-8b ] && V8=${V8:--256} || V8=$VALUES
  for v in $V8; do echo "== $P d16384 NEXT_L2=$v $(tg FERROLM_ATTN_NEXT_L2=$v)"; done
  if [ $P = olmoe-1b-7b ]; then
    for k in ${S2_KEYS:-400}; do echo "== $P d16384 ROW_STAGES=2 SPLIT_KEYS=$k $(tg FERROLM_ATTN_ROW_STAGES=2 FERROLM_ATTN_SPLIT_KEYS=$k)"; done
  fi
  echo "== $P d16384 base again $(tg A=0) at $(( $(date +%s) - t0 )) s"
done
# The MoE tg128 bars with the defaults, on this card.
for P in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf; EXTRA=
  echo "== $P tg128 llama-bench $(lb) ferrolm $(tg A=0) / $(tg A=0) at $(( $(date +%s) - t0 )) s"
done
F=$M/olmoe-1b-7b-pooled.gguf
for v in "A=0" "FERROLM_ATTN_NEXT_L2=-256" "FERROLM_ATTN_ROW_STAGES=2"; do
  env $v timeout 60 $B logits -m $F --backend cuda --all --step --tokens "$(seq -s ' ' 11 70)" 2>&1 | md5sum | sed "s/^/logits $v /"
done
# Where OLMoE's walk stalls at 16,384 keys, SASS line by line (the CSV comes back).
if [ "${STALLS:-1}" = 1 ]; then
  FERROLM_CUDA_GRAPH=0 timeout 150 ncu --clock-control none --cache-control none \
    --import-source no --section WarpStateStats --section SourceCounters --section InstructionStats \
    -k regex:attn_decode_group_rope_row --launch-skip 32 --launch-count 1 -o /tmp/walk \
    $B bench -m $F --backend cuda -p 0 -n 2 -d 16384 -r 1 > $OUT/walk.log 2>&1
  ncu -i /tmp/walk.ncu-rep --page source --csv --print-source sass > $OUT/walk.sass.csv 2>&1
  ncu -i /tmp/walk.ncu-rep --page details > $OUT/walk.details.txt 2>&1
  grep -E 'Executed Instructions |Warp Cycles Per Issued|Issued Ipc' $OUT/walk.details.txt
fi
echo "end at $(( $(date +%s) - t0 )) s"
