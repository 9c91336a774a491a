SW="FERROLM_MOE_DOWN_EARLY=1 FERROLM_MOE_BULK_L2=1"
DEPTH=0 SWITCHES="FERROLM_MOE_DOWN_EARLY=1 FERROLM_MOE_BULK_L2=1 FERROLM_MOE_DOWN_EARLY=1,FERROLM_MOE_BULK_L2=1 FERROLM_MOE_ROWS_L1=1,FERROLM_MOE_DOWN_EARLY=1" bash tools/device/s38_sweep.sh
source tools/device/carried.sh > /dev/null
toks=$(seq -s ' ' 3 7 250)
for P in olmoe-1b-7b qwen3-30b-a3b; do F=$M/$P-pooled.gguf
  $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/a.json 2>/dev/null
  env $SW $B logits -m $F --backend cuda --all --tokens "$toks" --step > /tmp/b.json 2>/dev/null
  echo -n "$P $SW / default: "; python3 $T/same_logits.py /tmp/b.json /tmp/a.json
done
