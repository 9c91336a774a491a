#!/bin/bash
# The tensor split over GPUs (issue 21), within one device call: NCCL found (cudarc opens it as
# libnccl.so, which the PyPI wheel ships only as libnccl.so.2: a link in a folder of our own,
# put on LD_LIBRARY_PATH before ferrolm starts), then the engine's `cuda_split` GPU tests from
# BIN_DIR: one rank on GPU 0 against the whole model, bit for bit (any kind), and two ranks
# on GPUs 0 and 1 within the split's contract (nvidia-h200-x2 and up).
# Usage on the GPU machine, from the repo root (writes under $OUT):
#   bash tools/device/split_check.sh BIN_DIR GOLDEN_DIR
# GOLDEN_DIR: tiny-llama-q8_0, tiny-qwen3-q8_0, tiny-llama-f32 and tiny-qwen3moe-q8_0 of
# ../shared/golden.
B=$1; G=$2
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
# NVLink multicast stays off (KINDS.md): set here too, whatever the image set.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -6
echo "== NCCL"
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
ls -la $nccl 2>/dev/null; ldconfig -p | grep -i nccl
if [ -f "$nccl/libnccl.so.2" ] && ! ldconfig -p | grep -q "libnccl.so "; then
  mkdir -p /tmp/nccl-link && ln -sf $nccl/libnccl.so.2 /tmp/nccl-link/libnccl.so
  export LD_LIBRARY_PATH=/tmp/nccl-link:$LD_LIBRARY_PATH
fi
n=$(nvidia-smi -L | wc -l)
echo "== cuda_split on $n GPU(s)"
tests="a_rank_alone a_split_of_one_rank a_split_by_layer a_row_split_of_one_rank"
[ "$n" -ge 2 ] && tests="a_rank_alone a_split a_row_split_of_one_rank"
FERROLM_GOLDEN_DIR=$(realpath $G) NCCL_DEBUG=WARN timeout 240 $B/cuda_split --include-ignored --test-threads 1 $tests 2>&1 | tail -25 | tee $OUT/split.txt
echo done
