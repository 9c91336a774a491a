#!/usr/bin/env bash
# Server throughput and latency on the default model, for docs/perf.md ("Server (CPU)").
# Usage: crates/cli/tests/serve/perf.sh [path/to/ferrolm]   (default: target/release/ferrolm)
# Needs the `openai` Python package (.ci/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bin=${1:-target/release/ferrolm}
client=crates/cli/tests/serve/openai_client.py
log=$(mktemp)
"$bin" serve --port 0 --parallel 8 -t 2 -c 512 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
until grep -q "listening on" "$log"; do sleep 0.2; done
port=$(grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2)
url=http://127.0.0.1:$port/v1
model=$(curl -s "$url/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
echo "32 clients x 10 requests, max_tokens 16, --parallel 8:"
python3 "$client" "$url" "$model" load 32 10 16 --count-mismatches
echo "8 clients x 5 requests, max_tokens 32 (--parallel 8):"
python3 "$client" "$url" "$model" load 8 5 32 --count-mismatches
echo "1 client x 20 requests, max_tokens 32 (sequential):"
python3 "$client" "$url" "$model" load 1 20 32 --count-mismatches
