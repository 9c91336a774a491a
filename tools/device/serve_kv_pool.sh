#!/bin/bash
# `ferrolm serve` on a GPU with a KV pool too small for its slots (issue 16: a full pool waits
# in the queue, never an out-of-memory failure): --parallel 8 -c 1024 --kv-blocks 40 (2.5
# contexts of 64-token blocks), 8 streamed requests of 600 tokens each (openai_client.py
# stream_load, ignore_eos: every one must run to max_tokens), so only 2-3 can hold their
# blocks at once and the rest wait for them; then the pool's gauges, and a second round that
# reuses the cached prompts. Needs `pip install openai==3.57.0`. Run on the GPU machine from the
# repo root:
#   bash tools/device/serve_kv_pool.sh BIN MODEL.gguf
B=$1
MODEL=$2
PORT=${PORT:-18556}
url=http://127.0.0.1:$PORT
$B serve -m "$MODEL" --backend cuda --parallel 8 -c 1024 --kv-blocks 40 --port $PORT > /tmp/serve-pool.log 2>&1 &
SP=$!
for _ in $(seq 120); do
  python3 -c "import urllib.request as u; u.urlopen('$url/health')" 2>/dev/null && break
  sleep 1
done
grep "KV pool" /tmp/serve-pool.log
ID=$(python3 -c "import json, urllib.request as u; print(json.load(u.urlopen('$url/v1/models'))['data'][0]['id'])")
for round in 1 2; do
  python3 crates/cli/tests/serve/openai_client.py $url/v1 "$ID" stream_load 8 600 100 && echo "round $round: all 8 ran to 600 tokens"
done
python3 -c "import urllib.request as u; print(u.urlopen('$url/metrics').read().decode())" \
  | grep -E '^ferrolm_(kv_blocks|queue_wait_seconds_(sum|count)|requests_total|prompt_tokens_cached_total)'
grep -iE "error|panic|full" /tmp/serve-pool.log || echo "server log: no errors"
kill $SP
wait $SP 2>/dev/null
