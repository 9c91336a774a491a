#!/bin/bash
# `ferrolm serve` on the GPU (issue 16, items 4, 5 and 7), through the openai client
# (crates/cli/tests/serve/batching_client.py; needs `pip install openai==3.57.0`):
#  1. prefix reuse: 32 chat requests sharing a ~1,024-token system prompt, against a server with
#     reuse and one without (--no-prefix-cache); greedy texts must match (the CUDA prefill's
#     arithmetic depends on the chunk's row count, so log-probabilities are not compared);
#     prints prompt, cached and computed token counts;
#  2. a long prompt arriving while another request streams: tokens keep coming during its
#     prefill, both answers equal their answers alone;
#  3. --deterministic: 8 prompts alone, then all at once, bit-identical text and logprobs.
# Run on the GPU machine from the repo root:
#   bash tools/device/serve_prefix.sh BIN_DIR MODEL.gguf
B=$1/ferrolm
MODEL=$2
C=${C:-4096}
PY=crates/cli/tests/serve/batching_client.py
serve() { # PORT ARGS... : starts a server in the background, waits until it answers
  local port=$1
  shift
  $B serve -m "$MODEL" --backend cuda --port "$port" -c $C "$@" > /tmp/serve-$port.log 2>&1 &
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    sleep 1
  done
  echo "server on $port did not start:" && cat /tmp/serve-$port.log && return 1
}
model_id() { curl -s "http://127.0.0.1:$1/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])'; }
trap 'kill $(jobs -p) 2> /dev/null' EXIT

echo "== prefix reuse, 32 requests, system prompt of 42 rules (~1,024 tokens)"
serve 18501 --parallel 8 && serve 18502 --parallel 8 --no-prefix-cache || exit 1
ID=$(model_id 18501)
python3 $PY http://127.0.0.1:18501/v1 "$ID" prefix http://127.0.0.1:18502/v1 32 42 text

echo "== a long prompt while another request streams (-b 64)"
serve 18503 --parallel 2 -b 64 --no-prefix-cache || exit 1
python3 $PY http://127.0.0.1:18503/v1 "$ID" interleave 300

echo "== --deterministic: 8 prompts alone, then together"
C=512 serve 18504 --parallel 8 --deterministic --no-prefix-cache || exit 1
python3 $PY http://127.0.0.1:18504/v1 "$ID" determinism 8
