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

# tg128 SETTING...: ferrolm's tg128 (t/s, -r 2) of $F, with $EXTRA's bench arguments (say
# `-d 16384`), under the given environment settings (at least one: `A=0` for none).
tg128() {
  timeout 120 env "$@" $B bench -m $F --backend cuda -p 0 -n 128 -r 2 $EXTRA 2>&1 |
    grep -E 'tg128|rror|panic' | awk -F'|' '{print $(NF-1)}'
}

# tg_rounds N LABEL=VAR=VALUE...: N rounds of tg128 of $F (with $EXTRA), each labelled setting
# in turn within a round (LABEL=A=0 for none), a line a round: "LABEL t/s | LABEL t/s ...".
tg_rounds() {
  local n=$1 r a line
  shift
  for r in $(seq $n); do
    line=
    for a in "$@"; do line="$line | ${a%%=*} $(tg128 ${a#*=})"; done
    echo "  ${line# | } at $(( $(date +%s) - t0 )) s"
  done
}

# llama_tg128: llama-bench's tg128 (t/s, -r 2) of $F with $EXTRA, as tg128 runs it.
llama_tg128() {
  timeout 200 $L/llama-bench -m $F -ngl 99 -fa 1 -p 0 -n 128 -r 2 $EXTRA 2>&1 |
    grep -E '^\| .*tg' | awk -F'|' '{print $(NF-1)}'
}

# logits_md5 FILE SETTING...: the md5 of FILE's logits over 60 tokens one a step under the
# settings (equal md5s: the same bits).
logits_md5() {
  local f=$1; shift
  env "$@" timeout 60 $B logits -m $f --backend cuda --all --step --tokens "$(seq -s ' ' 11 70)" 2>&1 |
    md5sum | cut -d' ' -f1
}

# batched_sweep SWITCH: $F in llama-batched-bench, then ferrolm's batched mode beside it (S_TG
# at 16 / 32 / 64 sequences, -npp 128 -ntg 128) with SWITCH=0, 1 and 0 again.
batched_sweep() {
  echo "== llama-batched-bench at $(( $(date +%s) - t0 )) s"
  timeout 100 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 |
    grep -E '^\|' | tail -3
  local s
  for s in 0 1 0; do
    echo "== $1=$s"
    env $1=$s timeout 90 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 |
      grep -E '^\| +[0-9]|rror|panic'
  done
}

# serve_setup: for the HTTP load scripts, the openai client (Python 3.12 wheels carried in
# target/wheels) installed into /tmp/site on PYTHONPATH, and Q, qwen3-8b's pooled Q4_K_M synth
# file with a BPE vocabulary (kept while the machine stays warm).
serve_setup() {
  python3 -m pip install --quiet --no-index --find-links target/wheels --target /tmp/site openai > /dev/null 2>&1
  export PYTHONPATH=/tmp/site
  Q=$M/qwen3-8b-bpe.gguf
  [ -s $Q ] || $B synth --preset qwen3-8b --type q4_k_m --vocab bpe --pooled -o $Q > /dev/null 2>&1
  echo "model at $(( $(date +%s) - t0 )) s"
}
