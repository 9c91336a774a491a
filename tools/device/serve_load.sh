#!/bin/bash
# Issue 16's HTTP bar: `ferrolm serve` under 64 streamed requests (openai_client.py
# stream_load, from 8 processes; needs `pip install openai==3.57.0`) beside `bench -npl 64` on
# the same file, with token 0 everywhere (llama-batched-bench's feed) and with each
# sequence's own tokens (--distinct-tokens, the server's kind of load for an MoE). Prints
# bench's tables, stream_load's JSON lines (rounds 2 and 3 reuse round 1's prompts) and the
# server's step metrics. SERVE_ARGS: more `serve` flags; BENCH=0: the server alone. Run on the
# GPU machine from the repo root:
#   [SERVE_ARGS=...] [BENCH=0] bash tools/device/serve_load.sh BIN MODEL.gguf
B=$1
MODEL=$2
PORT=${PORT:-18555}
bb() { $B bench -m "$MODEL" --backend cuda -c 20000 -npp 128 -ntg 128 -npl 64 "$@" 2>&1 | grep -E '^\|  '; }
if [ "${BENCH:-1}" = 1 ]; then
  bb
  bb --distinct-tokens
fi
$B serve -m "$MODEL" --backend cuda --parallel 64 -c 1024 -b 2048 --port $PORT $SERVE_ARGS > /tmp/serve-load.log 2>&1 &
SP=$!
url=http://127.0.0.1:$PORT
for _ in $(seq 120); do
  python3 -c "import urllib.request as u; u.urlopen('$url/health')" 2>/dev/null && break
  sleep 1
done
# The id the server gives the model (its file name without .gguf).
ID=$(python3 -c "import json, urllib.request as u; print(json.load(u.urlopen('$url/v1/models'))['data'][0]['id'])")
for max_tokens in 128 128 128 512; do
  python3 crates/cli/tests/serve/openai_client.py $url/v1 "$ID" stream_load 64 $max_tokens 100
done
python3 -c "import urllib.request as u; print(u.urlopen('$url/metrics').read().decode())" \
  | grep -E '^ferrolm_(batch_(steps|step_rows|step_seconds_(sum|count)|sample_seconds_(sum|count)|forward_seconds_(sum|count))|kv_blocks|time_to_first_token_seconds_(sum|count))'
kill $SP
wait $SP 2>/dev/null
