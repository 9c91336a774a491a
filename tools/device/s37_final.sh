#!/bin/bash
# Session 37's last call: cuda-parity (the rotating walks' rows among all), the same logits
# through the CLI with FERROLM_ATTN_ROPE on and off (pooled OLMoE and qwen3-8b, 36 tokens one
# a step), tg128 bars beside llama-bench (the switch off as a second column), then both depth
# bars (tg128 after 16,384 tokens, qwen3-8b and OLMoE). Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz:  bash tools/device/s37_final.sh
source tools/device/carried.sh
run_parity ${SEED:-173}
echo "rotating walk rows: $(grep -c '_rope' $OUT/parity.txt), failing $(grep '_rope' $OUT/parity.txt | grep -c FAIL)"
pooled qwen3-8b olmoe-1b-7b
toks=$(seq -s ' ' 3 7 250)
for P in olmoe-1b-7b qwen3-8b; do
  F=$M/$P-pooled.gguf
  $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/$P-on.json 2> /tmp/$P-on.err ||
    tail -3 /tmp/$P-on.err
  FERROLM_ATTN_ROPE=0 $B logits -m $F --backend cuda --all --tokens "$toks" --step \
    > /tmp/$P-off.json 2> /dev/null
  echo -n "$P FERROLM_ATTN_ROPE on / off: "; python3 $T/same_logits.py /tmp/$P-on.json /tmp/$P-off.json
done
PARITY=0 PRESETS="qwen3-30b-a3b olmoe-1b-7b qwen3-8b" SWITCHES=FERROLM_ATTN_ROPE=0 \
  KERNELS=attn_decode_group_tc bash $T/s36_check.sh
for P in qwen3-8b olmoe-1b-7b; do
  F=$M/$P-pooled.gguf
  echo "== $P -d 16384 llama-bench: $(timeout 120 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -d 16384 -r 2 2>&1 | grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}')"
  echo "== $P -d 16384 ferrolm: $(timeout 90 $B bench -m $F --backend cuda -p 0 -n 128 -d 16384 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}') / FERROLM_ATTN_ROPE=0 $(FERROLM_ATTN_ROPE=0 timeout 90 $B bench -m $F --backend cuda -p 0 -n 128 -d 16384 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}')"
done
