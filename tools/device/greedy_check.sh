#!/bin/bash
# NOTE (session 26): the texts' hashes differ run to run even with the switch unchanged (the
# server batches requests as they arrive, and a GPU pass's logits depend on its batch size), so
# they cannot show the switch's equality; cuda_paths' greedy_picks_on_the_gpu_are_the_hosts
# does. The switch is on by default since.
# Issue 16's server path after session 25, in one device call (writes under $OUT): the greedy
# picks on the GPU (FERROLM_GREEDY_ON_DEVICE=1, off by default until this runs) and the host
# sampling's fast path. cuda-parity (its greedy_rows rows among every other); then `serve` on
# qwen3-8b with a BPE vocabulary, with the switch off and on: 16 concurrent greedy
# completions (some with ignore_eos) whose texts must be the same both ways, and
# serve_load.sh's 64 streams (the openai client's wheels from .device-carry/wheels) beside
# bench -npl 64, with the step, forward and sample histograms.
# Usage, from the repo root, .device-carry/ holding ferrolm.xz and wheels/:
#   bash tools/device/greedy_check.sh
source tools/device/carried.sh
python3 -m pip install --quiet --no-index --find-links $D/wheels --target /tmp/site openai > /dev/null 2>&1
MODEL=$M/qwen3-8b-bpe.gguf
[ -s $MODEL ] || $B synth --preset qwen3-8b --type q4_k_m --vocab bpe -o $MODEL > $OUT/synth.txt 2>&1
echo "== parity"
timeout 300 $B cuda-parity --seed 97 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
grep -E "greedy_rows" $OUT/parity.txt
echo "rows failing: $(grep -c '| FAIL |' $OUT/parity.txt)"; grep '| FAIL |' $OUT/parity.txt | head
PORT=18556
texts() { # the texts of 16 concurrent greedy completions, hashed
  $B serve -m $MODEL --backend cuda --parallel 16 -c 512 --port $PORT > /tmp/serve-greedy.log 2>&1 &
  local sp=$!
  for _ in $(seq 120); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health')" 2>/dev/null && break
    sleep 1
  done
  python3 - $PORT <<'PY'
import hashlib, json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
base = f"http://127.0.0.1:{sys.argv[1]}/v1"
model = json.load(urllib.request.urlopen(base + "/models"))["data"][0]["id"]
url = base + "/completions"
def one(i):
    body = {"model": model, "prompt": f"{i}: the quick brown fox " * (1 + i % 5), "max_tokens": 48,
            "temperature": 0, "ignore_eos": i % 2 == 0}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))["choices"][0]["text"]
with ThreadPoolExecutor(16) as ex:
    out = list(ex.map(one, range(16)))
print(hashlib.sha256(json.dumps(out).encode()).hexdigest()[:16], sum(map(len, out)), "chars")
PY
  kill $sp; wait $sp 2>/dev/null
}
echo "== 16 greedy completions, FERROLM_GREEDY_ON_DEVICE=0 then 1 (the hashes must agree)"
FERROLM_GREEDY_ON_DEVICE=0 texts
FERROLM_GREEDY_ON_DEVICE=1 texts
for s in 0 1; do
  echo "== serve_load, FERROLM_GREEDY_ON_DEVICE=$s"
  FERROLM_GREEDY_ON_DEVICE=$s PYTHONPATH=/tmp/site timeout 200 bash $T/serve_load.sh $B $MODEL 2>&1 | tail -17
done
echo done
