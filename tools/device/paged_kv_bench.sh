#!/bin/bash
# The paged KV cache's speed (issue 16), in one device call, on `synth --preset olmoe-1b-7b
# --type q4_k_m --vocab bpe`: llama.cpp's llama-batched-bench and llama-bench (tg128, and at
# depth 8192) beside `ferrolm bench` with the default blocks, with one block a sequence
# (FERROLM_KV_BLOCK=1048576: the contiguous layout, in one pool) and with a pool a sequence
# too (FERROLM_KV_POOL=0: the layout and allocations before paging); then `serve` under 64
# streamed requests
# (tools/device/serve_load.sh; the openai client's wheels installed into /tmp/site from
# WHEELS). Usage on the GPU machine, from the repo root:
#   bash tools/device/paged_kv_bench.sh BIN LLAMA_BIN [WHEELS]   (no WHEELS: no server run)
B=$1; L=$2; W=$3
M=target/device-models # ignored: stays between calls while the machine is warm
mkdir -p $M
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
[ -s $M/olmoe.gguf ] || $B synth --preset olmoe-1b-7b --type q4_k_m --vocab bpe -o $M/olmoe.gguf > /dev/null 2>&1
ls -la $M
echo "== llama-batched-bench olmoe"
timeout 150 $L/llama-batched-bench -m $M/olmoe.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 1,8,32,64 2>&1 | grep -E '^\|'
for setting in FERROLM_KV_BLOCK=64 FERROLM_KV_BLOCK=1048576 "FERROLM_KV_BLOCK=1048576 FERROLM_KV_POOL=0"; do
  echo "== ferrolm bench -npl, $setting"
  env $setting timeout 120 $B bench -m $M/olmoe.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 1,8,32,64 2>&1 | grep -E '^\||rror'
done
echo "== llama-bench tg128 and at depth 8192"
timeout 150 $L/llama-bench -m $M/olmoe.gguf -ngl 99 -fa 1 -p 0 -n 128 -d 0,8192 -r 2 2>&1 | grep -E '^\|'
for blk in 64 1048576; do
  echo "== ferrolm bench tg128 and at depth 8192, FERROLM_KV_BLOCK=$blk"
  FERROLM_KV_BLOCK=$blk timeout 150 $B bench -m $M/olmoe.gguf --backend cuda -p 0 -n 128 -d 0,8192 -r 2 2>&1 | grep -E '^\||rror'
done
# DENSE=qwen3-8b (say): that preset's batched figures too, llama.cpp and the default blocks.
if [ -n "$DENSE" ]; then
  [ -s $M/$DENSE.gguf ] || $B synth --preset $DENSE --type q4_k_m -o $M/$DENSE.gguf > /dev/null 2>&1
  echo "== llama-batched-bench $DENSE"
  timeout 150 $L/llama-batched-bench -m $M/$DENSE.gguf -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 1,8,32,64 2>&1 | grep -E '^\|'
  echo "== ferrolm bench -npl $DENSE"
  timeout 120 $B bench -m $M/$DENSE.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 1,8,32,64 2>&1 | grep -E '^\||rror'
fi
if [ -n "$W" ]; then
  echo "== serve: 64 streamed requests (the shared pool), and its KV gauges"
  python3 -m pip install --quiet --no-index --find-links $W --target /tmp/site openai > /dev/null 2>&1
  PYTHONPATH=/tmp/site timeout 200 bash tools/device/serve_load.sh $B $M/olmoe.gguf 2>&1 | tail -14
  grep -E "KV pool" /tmp/serve-load.log
fi
echo done
