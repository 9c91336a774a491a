#!/bin/bash
# Issue 21's bars on a machine of two or more H200s (nvidia-h200-x2 and up), in one device call:
# for each preset, the same `synth --type q4_k_m` file to ferrolm on one GPU and as a row split
# over N GPUs (`--split-mode row --tensor-split 1,...`), tg128, pp2048 and
# llama-batched-bench-style 64-sequence decode; llama.cpp's layer split over the same GPUs
# beside them. NCCL is found as tools/device/split_check.sh finds it.
# Run on the GPU machine from the repo root (sourcing carried.sh: B, L, M):
#   N=2 bash tools/device/split_bench.sh qwen3-30b-a3b
# qwen3-235b-a22b's 142 GB do not fit the 2-GPU kind's 128 GB disk: there, put the models in
# memory first (256 GB): mount -o remount,size=200G /dev/shm; MODELS=/dev/shm N=2 bash ...
# (the 4-GPU kind's 235 GB disk holds it: N=4).
. tools/device/carried.sh
M=${MODELS:-$M}
N=${N:-2}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
if [ -f "$nccl/libnccl.so.2" ] && ! ldconfig -p | grep -q "libnccl.so "; then
  mkdir -p /tmp/nccl-link && ln -sf $nccl/libnccl.so.2 /tmp/nccl-link/libnccl.so
  export LD_LIBRARY_PATH=/tmp/nccl-link:$LD_LIBRARY_PATH
fi
ts=$(seq -s, 1 $N | sed 's/[0-9]\+/1/g')
nvidia-smi topo -m 2>/dev/null | head -$((N + 2))
for p in "$@"; do
  # Pooled blocks: qwen3-235b-a22b's 142 GB in the time the disk takes.
  [ -s $M/$p.gguf ] || $B synth --preset $p --type q4_k_m --pooled -o $M/$p.gguf > /dev/null 2>&1
  echo "== $p llama.cpp, one GPU and -sm layer over $N"
  CUDA_VISIBLE_DEVICES=0 timeout 200 $L/llama-bench -m $M/$p.gguf -ngl 99 -fa 1 -p 2048 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -n +3
  timeout 200 $L/llama-bench -m $M/$p.gguf -ngl 99 -fa 1 -sm layer -ts $ts -p 2048 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -n +3
  for split in "--main-gpu 0" "--split-mode row --tensor-split $ts" "--split-mode layer --tensor-split $ts"; do
    echo "== $p ferrolm $split"
    timeout 240 $B bench -m $M/$p.gguf --backend cuda $split -p 2048 -n 128 -r 3 2>&1 | grep -E '^\| |rror'
    timeout 240 $B bench -m $M/$p.gguf --backend cuda $split -c 20000 -npp 128 -ntg 128 -npl 64 2>&1 | grep -E '^\| +128|rror'
  done
done
