#!/bin/bash
# Session 35's last call (writes under $OUT): cuda-parity at seed 161, whose two attn_prefill
# q4_0 rows failed before kv_checks.rs measured a rotated cache's errors against its chunks'
# magnitudes; prints the quantized-cache attention rows and any failing row. Usage, from the
# repo root, .device-carry/ from tools/device/pack.sh: [SEED=n] bash tools/device/s35_parity.sh
source tools/device/carried.sh
run_parity ${SEED:-161}
grep -E "^\| attn_(prefill|decode) q(4|8)_0" $OUT/parity.txt | awk -F'|' '{print $2 "|" $3 "|" $6 "|" $9}' | head -40
