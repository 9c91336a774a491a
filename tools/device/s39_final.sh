#!/bin/bash
# Session 39's bars (next session's first call: ALT=FERROLM_ATTN_BULK=1): cuda-parity, then tg128 of OLMoE, qwen3-30b-a3b and qwen3-8b and both
# depth presets at -d 16384 beside llama-bench, with BASE's settings (space-separated) on top of
# the binary's defaults and, where ALT is given, with ALT's too. Usage, from the repo root,
# .device-carry/ holding ferrolm.xz and llama.tar.xz:
#   [BASE="A=1"] [ALT="B=1"] [SEED=177] bash tools/device/s39_final.sh
source tools/device/carried.sh
pooled olmoe-1b-7b qwen3-30b-a3b qwen3-8b
( [ -n "$BASE" ] && export $BASE; run_parity ${SEED:-177} )
run() { # PRESET EXTRA
  F=$M/$1-pooled.gguf; EXTRA=$2
  local alt=; [ -n "$ALT" ] && alt="alt $(tg128 $BASE $ALT)"
  echo "== $1 $2 llama-bench $(llama_tg128) ferrolm $(tg128 $BASE A=0) / $(tg128 $BASE A=0) $alt at $(( $(date +%s) - t0 )) s"
}
# With ALT: OLMoE's logits of 60 tokens one a step, with and without it (md5s equal: the same bits).
if [ -n "$ALT" ]; then
  for v in "A=0" "$ALT"; do
    echo "logits $v $(logits_md5 $M/olmoe-1b-7b-pooled.gguf $BASE $v)"
  done
fi
run olmoe-1b-7b ""; run qwen3-30b-a3b ""; run qwen3-8b ""
run olmoe-1b-7b "-d 16384"; run qwen3-8b "-d 16384"
echo "end at $(( $(date +%s) - t0 )) s"
