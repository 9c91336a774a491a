#!/bin/bash
# What each kernel of a decode token costs the chain of launches as it runs (graphs and PDL on),
# which ncu's one launch at a time does not show: tg128 with that kernel left out
# (FERROLM_TIMING_SKIP; the outputs are wrong, the timing is the point), against tg128 whole,
# run before and after the rest. Writes under $OUT. Usage, from the repo root, .device-carry/
# from tools/device/pack.sh: [MODELS="qwen3-30b-a3b olmoe-1b-7b"] [SKIPS="a b,c ..."] [BATCH=B]
# bash tools/device/chain_costs.sh (SKIPS: the rows, each a comma list; BATCH: S_TG of B
# sequences, -c 20000 -npp 128 -ntg 128, in place of tg128)
# (Leaving the router out leaves every slot on expert 0, the routing buffer's zeros: the
# experts' weights then come from L2, so the router's row also counts that. mmvq_wide_q takes
# the output head's product with the o projections.)
source tools/device/carried.sh
MODELS=${MODELS:-qwen3-30b-a3b olmoe-1b-7b}
pooled $MODELS
echo "models at $(( $(date +%s) - t0 )) s"
if [ -z "$BATCH" ]; then
  tg() { timeout 90 $B bench -m $F --backend cuda -p 0 -n 128 -r 2 2>&1 | grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'; }
else
  tg() { timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl $BATCH 2>&1 | grep -E '^\| +[0-9]|rror|panic' | awk -F'|' '{print $(NF-3)}'; }
fi
# One token's launches by name start, a row each; the last rows leave out groups of them.
# (add_rms_norm_exact: the attention norm since FERROLM_NORM_EXACT; the other name's row then
# leaves out nothing on these models, nor do qk_norm_rope's and kv_store's on qwen3's, whose
# walk does both since FERROLM_ATTN_ROPE.)
SKIPS=${SKIPS:-"add_rms_norm_q8_1 add_rms_norm_exact mmvq_wide_triple qk_norm_rope kv_store attn_decode mmvq_wide_q add_rms_norm_route
moe_gate_up quantize_q8_k moe_down
moe_gate_up,quantize_q8_k,moe_down add_rms_norm_route,moe_gate_up,quantize_q8_k,moe_down
add_rms_norm_q8_1,add_rms_norm_exact,mmvq_wide_triple,qk_norm_rope,kv_store,attn_decode,mmvq_wide_q"}
for P in $MODELS; do
  F=$M/$P-pooled.gguf
  echo "== $P whole: $(tg)"
  for s in $SKIPS; do
    echo "$P without $s: $(FERROLM_TIMING_SKIP=$s tg)"
  done
  echo "== $P whole: $(tg)"
done
echo "end at $(( $(date +%s) - t0 )) s"
