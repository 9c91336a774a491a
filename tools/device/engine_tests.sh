#!/bin/bash
# The engine's GPU tests (crates/engine/tests/cuda_paths.rs, every #[ignore = "needs a GPU"]
# test) on the device, one call (writes under $OUT). Carry target/carry-t/ holding
# cuda_paths.xz (`cargo test --release -p ferrolm-engine --test cuda_paths --no-run`, the
# binary stripped and xz-compressed) and golden-tiny.tar.xz (../shared/golden's tiny
# q4_k_m and q8_0 models and goldens). Usage, from the repo root: [FILTER=name] bash
# tools/device/engine_tests.sh
C=target/carry-t; G=target/golden-tiny; X=target/dev-bin/cuda_paths
mkdir -p $G $(dirname $X)
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
[ -f $C/golden-tiny.tar.xz ] && tar xJf $C/golden-tiny.tar.xz -C $G
[ -f $C/cuda_paths.xz ] && xz -d -c $C/cuda_paths.xz > $X && chmod +x $X
nvidia-smi --query-gpu=name --format=csv,noheader
FERROLM_GOLDEN_DIR=$(realpath $G) timeout 540 $X --ignored --test-threads 1 $FILTER > $OUT/cuda_paths.txt 2>&1
echo "cuda_paths rc=$?"
grep -E "^test |test result|panicked|max \|" $OUT/cuda_paths.txt | tail -60
