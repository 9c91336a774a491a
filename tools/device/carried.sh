# Sourced by the device scripts (from the repo root, on the GPU machine): unpacks what the
# call carried in .device-carry/ (ferrolm.xz: the stripped release binary, xz-compressed;
# llama.tar.xz: ../shared/bench's archive, unpacked once while the machine stays warm; either
# may be absent where the call does not need it; tools/device/pack.sh makes both) and sets the
# names the scripts share:
#   D the carried folder, T this folder, M the synthesized models (ignored, so they stay
#   between calls on a warm machine), L llama.cpp's binaries, B ferrolm, t0 the call's start.
D=.device-carry; T=tools/device; M=target/device-models; L=target/anchor/bin
B=target/dev-bin/ferrolm
mkdir -p "$(dirname $B)" $L $M
[ -f $D/ferrolm.xz ] && xz -d -c $D/ferrolm.xz > $B && chmod +x $B
[ -x $L/llama-batched-bench ] || { [ -f $D/llama.tar.xz ] && tar xJf $D/llama.tar.xz -C $L; }
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
# The call's start (for the scripts' "at N s" lines), and which GPU it landed on (calls may
# get an H100 or an H200).
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader

# pooled PRESET...: each preset's pooled Q4_K_M synth file, $M/PRESET-pooled.gguf (seconds to
# write; kept while the machine stays warm), written side by side.
pooled() {
  local p
  for p in "$@"; do
    [ -s $M/$p-pooled.gguf ] || $B synth --preset $p --type q4_k_m --pooled -o $M/$p-pooled.gguf > /dev/null 2>&1 &
  done
  wait
}

# ncu_line FILE NCU_ARGS...: ncu (the clocks and caches as the program leaves them) with the
# given arguments (kernel filter, metrics, the program) into $OUT/FILE; prints one line of
# each profiled launch's kernel name and metric values.
ncu_line() {
  local f=$1; shift
  timeout 120 ncu --clock-control none --cache-control none "$@" > $OUT/$f 2>&1
  grep -E '^  [a-z_0-9]+ \(|^    [a-z0-9_]+__[a-z]' $OUT/$f |
    awk '/\(/ { print $1; next } { print $1, $NF }' | tr '\n' ' '
}

# run_parity SEED: cuda-parity into $OUT/parity.txt; prints its last line, the seconds since
# t0 (the caller's start) and any failing rows.
run_parity() {
  timeout 200 $B cuda-parity --seed $1 > $OUT/parity.txt 2>&1
  echo "parity rc=$? $(tail -1 $OUT/parity.txt) at $(( $(date +%s) - t0 )) s"
  grep '| FAIL |' $OUT/parity.txt | head
}
