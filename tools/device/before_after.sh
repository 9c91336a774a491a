#!/bin/bash
# A refactor's contract on the GPU: two builds of ferrolm (before and after) give byte-identical
# logits on every golden file in every mode and switch, the same cuda-parity table, and the same
# speed. Run on the GPU machine from the repo root.
#   bash tools/device/before_after.sh hashes BIN GOLDEN_DIR OUTFILE [STEM...]
#       one line per run: the sha256 of `ferrolm logits --backend cuda` output and its exit
#       status. Two builds' files are compared with `diff` (they may come from different calls).
#   bash tools/device/before_after.sh bench BEFORE_BIN AFTER_BIN PRESET...
#       `ferrolm bench` of both builds, alternated, on `synth --preset P --type q4_k_m` files.
PHASE=$1
M=target/device-models # ignored: stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M

if [ "$PHASE" = hashes ]; then
  BIN=$(readlink -f "$2")
  G=$3
  OUTFILE=$4
  shift 4
  stems=${*:-$(cd $G && ls *.gguf | sed 's/\.gguf$//' | tr '\n' ' ')}
  T36=$(seq -s ' ' 3 7 250)
  T300=$(for i in $(seq 0 299); do echo -n "$(((i * 37 + 5) % 512)) "; done)
  # Every run-time switch of the CUDA backend on three files (dense Q4_K_M, MoE Q8_0, MoE
  # Q4_K_M: every kernel family), the plain modes on every file.
  switches="FERROLM_CUDA_FUSE=0 FERROLM_CUDA_GRAPH=0 FERROLM_CUDA_MMQ=0 FERROLM_ATTN_MMA=0
    FERROLM_ATTN_MMA=1 FERROLM_ATTN=f32 FERROLM_MMVQ_WIDE=0 FERROLM_CUDA_Q8_0_LANES=0
    FERROLM_CUDA_INT_SCALES=0 FERROLM_CUDA_INT_SCALES=1 FERROLM_CUDA_Q8K=0 FERROLM_MOE_FUSED=0
    FERROLM_MOE_GROUPED=0 FERROLM_MMQ_TILE=64x64 FERROLM_MMQ_TILE=128x64"
  : > $OUTFILE
  run() { # tag env args...
    local tag=$1 sw=$2
    shift 2
    local h
    h=$(env $sw $BIN logits --backend cuda "$@" 2> /dev/null | sha256sum | cut -c1-16)
    echo "$tag: $h rc=${PIPESTATUS[0]}" >> $OUTFILE
  }
  for s in $stems; do
    f=$G/$s.gguf
    run "$s 36" X=1 -m $f --all --tokens "$T36"
    run "$s 36 --step" X=1 -m $f --all --step --tokens "$T36"
    run "$s 300" X=1 -m $f --all --tokens "$T300"
    # -ngl 2 of 2 blocks: block 0 on the CPU, the rest on the GPU.
    run "$s -ngl 2" X=1 -m $f -ngl 2 --all --tokens "$T36"
    case $s in tiny-llama-q4_k_m | tiny-qwen3moe-q8_0 | tiny-olmoe-q4_k_m | tiny-qwen3moe-f32)
      for sw in $switches; do
        run "$s 36 $sw" $sw -m $f --all --tokens "$T36"
        run "$s 36 --step $sw" $sw -m $f --all --step --tokens "$T36"
      done
      ;;
    esac
  done
  echo "hashes: $(wc -l < $OUTFILE) runs, $(grep -vc 'rc=0$' $OUTFILE) with a nonzero exit"
fi

if [ "$PHASE" = bench ]; then
  A=$(readlink -f "$2")
  B=$(readlink -f "$3")
  shift 3
  for p in "$@"; do
    [ -s $M/$p.gguf ] || $B synth --preset $p --type q4_k_m -o $M/$p.gguf > /dev/null 2>&1
    # Alternate the builds so drift of the machine shows in both.
    for side in before after before after; do
      bin=$A
      [ $side = after ] && bin=$B
      echo "== $p $side"
      timeout 150 $bin bench -m $M/$p.gguf --backend cuda -p 512 -n 128 -r 3 2>&1 | grep '|' | tail -2
      timeout 90 $bin bench -m $M/$p.gguf --backend cuda -p 2048 -n 0 -r 3 --ubatch-size 2048 2>&1 |
        tail -1
    done
  done
fi
