#!/bin/bash
# A refactor's contract on the CPU: `ferrolm logits` (output and exit status) of every tiny
# golden in many modes and switches, and the FERROLM_DUMP_DIR files of two models, compared
# byte for byte with a baseline made by the build before the change.
# Usage: tools/parity/cpu_before_after.sh BIN BASELINE_DIR [--make]   (--make writes the baseline)
BIN=$(readlink -f "$1"); BASE=$(readlink -m "$2"); MAKE=$3
G=$(dirname "$0")/../../../shared/golden
OUTD=$(mktemp -d /tmp/checkcpu.XXXX)
[ "$MAKE" = --make ] && { rm -rf $BASE; mkdir -p $BASE; OUTD=$BASE; }
T3="5 6 7"; T36=$(seq -s ' ' 3 7 250); T100=$(seq -s ' ' 11 5 510); T300=$(for i in $(seq 0 299); do echo -n "$(( (i*37+5) % 512 )) "; done)
fail=0; n=0
run() { # name env args...
  local name=$1 envs=$2; shift 2
  env $envs "$BIN" logits -t 2 "$@" > $OUTD/$name.json 2> $OUTD/$name.err
  echo "rc=$?" >> $OUTD/$name.json
  n=$((n+1))
  if [ "$MAKE" != --make ] && ! cmp -s $OUTD/$name.json $BASE/$name.json; then echo "DIFF $name"; fail=1; fi
}
for f in $G/tiny-*.gguf; do
  s=$(basename $f .gguf)
  run $s-3 X=1 -m $f --all --tokens "$T3"
  run $s-36 X=1 -m $f --all --tokens "$T36"
  run $s-100 X=1 -m $f --all --tokens "$T100"
  run $s-300 X=1 -m $f --all --tokens "$T300"
  run $s-36-step X=1 -m $f --all --step --tokens "$T36"
  run $s-100-step X=1 -m $f --step --tokens "$T100"
  run $s-36-ref FERROLM_CPU_MATMUL=reference -m $f --all --tokens "$T36"
  run $s-36-scalar FERROLM_CPU_MATMUL=scalar -m $f --all --tokens "$T36"
  run $s-36-attnf32 FERROLM_ATTN=f32 -m $f --all --tokens "$T36"
  run $s-36-kvf32 X=1 -m $f --all --tokens "$T36" --cache-type f32
  run $s-100-top X=1 -m $f --top 5 --tokens "$T100"
done
# Dumps (FERROLM_DUMP_DIR) of one dense and one MoE model.
for s in tiny-qwen3-q4_k_m tiny-olmoe-q8_0; do
  d=$OUTD/dump-$s; mkdir -p $d
  FERROLM_DUMP_DIR=$d "$BIN" logits -t 2 -m $G/$s.gguf --all --tokens "$T36" > /dev/null 2>&1
  n=$((n+1))
  if [ "$MAKE" != --make ]; then
    if ! diff -rq $d $BASE/dump-$s > /dev/null; then echo "DIFF dump-$s"; diff -rq $d $BASE/dump-$s | head -5; fail=1; fi
  fi
done
if [ "$MAKE" = --make ]; then echo "baseline written: $n runs in $BASE"; exit 0; fi
[ $fail = 0 ] && echo "ALL SAME ($n runs)" || { echo "SOME DIFFER (outputs in $OUTD)"; exit 1; }
