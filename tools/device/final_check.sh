#!/bin/bash
# The device checks in two phases, each within one device call (10 minutes):
#   check: kernel parity (and --time), the golden bars on CUDA, each fast-path switch against
#          its default, `serve` on CUDA;
#   bench: synthesizes the benchmark models (the machine starts bare on most calls), then the
#          benchmarks and the stage breakdowns.
# Usage on the GPU machine, from the repo root (writes under $OUT):
#   bash tools/device/final_check.sh check|bench BIN_DIR GOLDEN_DIR
# GOLDEN_DIR holds the shared tiny goldens and their models; the goldens under goldens/ name
# recipes instead, whose models golden_check.py makes with BIN_DIR/ferrolm (sha256-checked).
PHASE=$1
B=$2/ferrolm
G=$3
T=$(dirname "$0")
M=target/device-models # ignored, so it stays between calls while the machine is warm
export FERROLM_CACHE=${FERROLM_CACHE:-/tmp/ferrolm-cache}
mkdir -p $M

if [ "$PHASE" = check ]; then

# cuda-parity computes its CPU references on all cores: run nothing beside it (a synthesis in
# the background took it past 170 s in session 9), and give it room.
timeout 300 $B cuda-parity --seed 11 > $OUT/parity.txt 2>&1; echo "parity rc=$? $(tail -1 $OUT/parity.txt)"
if [ -n "$TIME" ]; then # TIME=1: the kernel timing tables too (a few minutes)
  timeout 240 $B cuda-parity --seed 12 --time > $OUT/time.txt 2>&1; echo "parity --time rc=$?"
  grep -A40 "mmvq timing" $OUT/time.txt | head -45
fi

echo "== goldens on CUDA (f16 cache)"
golden_stems=$(cd $G && ls *.json | sed 's/\.json$//' | tr '\n' ' ')
python3 $T/golden_check.py $B $G $golden_stems -- --backend cuda 2>&1 | tee $OUT/goldens.txt
echo "== llama-family goldens on CUDA (rope_freqs, linear/YaRN scaling, Mixtral MoE, biases)"
# Every golden of the folder; golden_check.py makes each model from its recipe with $B first.
python3 $T/golden_check.py $B goldens/llama-family -- --backend cuda 2>&1 | tee -a $OUT/goldens.txt
echo "== the same with FERROLM_CUDA_Q8K=0 (Q8_1 activations for K-quants too)"
FERROLM_CUDA_Q8K=0 python3 $T/golden_check.py $B $G $(echo $golden_stems | tr ' ' '\n' | grep q4_k_m) -- --backend cuda 2>&1 | tee -a $OUT/goldens.txt

echo "== shape-space goldens on CUDA (goldens/shape-space: every golden, models from recipes; known gaps as the CPU test's)"
python3 $T/golden_check.py $B goldens/shape-space -- --backend cuda 2>&1 | tee $OUT/shape_space.txt
echo "== fast-path switches"
toks=$(seq -s ' ' 3 7 250)
run() { env $1 $B logits -m $G/$2.gguf --backend cuda --all --tokens "$toks" $3 > /tmp/$4.json 2>/dev/null; }
for m in tiny-llama-q4_k_m tiny-qwen3moe-q8_0 tiny-olmoe-q4_k_m; do
  run X=1 $m --step $m-step; run FERROLM_CUDA_FUSE=0 $m --step $m-nofuse; run FERROLM_CUDA_GRAPH=0 $m --step $m-nograph
  run FERROLM_CUDA_FUSE=0 $m "" $m-batch-nofuse
  run X=1 $m "" $m-batch; run FERROLM_CUDA_MMQ=0 $m "" $m-nommq
  # The two f32 prefill kernels, both forced (36 rows would take ggml's f16 arithmetic).
  run FERROLM_ATTN_MMA=0 $m "" $m-scalarattn; run FERROLM_ATTN_MMA=1 $m "" $m-mmaattn
  run FERROLM_MMVQ_WIDE=0 $m --step $m-narrow; run "FERROLM_MMVQ_WIDE=0 FERROLM_CUDA_FUSE=0" $m --step $m-narrow-nofuse
  python3 $T/same_logits.py /tmp/$m-step.json /tmp/$m-nofuse.json
  python3 $T/same_logits.py /tmp/$m-batch.json /tmp/$m-batch-nofuse.json
  python3 $T/same_logits.py /tmp/$m-step.json /tmp/$m-narrow.json 0.2
  python3 $T/same_logits.py /tmp/$m-narrow.json /tmp/$m-narrow-nofuse.json
  python3 $T/same_logits.py /tmp/$m-step.json /tmp/$m-nograph.json
  python3 $T/same_logits.py /tmp/$m-mmaattn.json /tmp/$m-scalarattn.json 0.2
  python3 $T/same_logits.py /tmp/$m-batch.json /tmp/$m-nommq.json 0.2
  # Q8_0 GEMMs under 256 rows: the eight-lane kernel against the tensor-core one.
  run FERROLM_CUDA_Q8_0_LANES=0 $m "" $m-mmaq8; python3 $T/same_logits.py /tmp/$m-batch.json /tmp/$m-mmaq8.json 0.2
  # Batches under 64 rows take ggml's f16 attention, decode steps f32: compare on f32.
  run FERROLM_ATTN=f32 $m "" $m-batch-f32; python3 $T/same_logits.py /tmp/$m-batch-f32.json /tmp/$m-step.json 0.2
done 2>&1 | tee $OUT/switches.txt
for m in tiny-llama-q4_k_m tiny-qwen3moe-q8_0; do
  # -ngl 2 of 2 blocks: block 0 on the CPU, block 1 and the output on the GPU.
  run X=1 $m "-ngl 2" $m-split; python3 $T/same_logits.py /tmp/$m-batch.json /tmp/$m-split.json 0.5
done 2>&1 | tee -a $OUT/switches.txt
for m in tiny-qwen3moe-q8_0 tiny-qwen3moe-q4_k_m tiny-olmoe-q4_k_m; do
  run X=1 $m --step $m-step; run X=1 $m "" $m-batch
  run FERROLM_MOE_FUSED=0 $m --step $m-nomoefuse; run FERROLM_MOE_GROUPED=0 $m "" $m-ungrouped
  run FERROLM_CUDA_INT_SCALES=0 $m "" $m-subs
  python3 $T/same_logits.py /tmp/$m-batch.json /tmp/$m-subs.json 0.2
  run FERROLM_MMVQ_WIDE=0 $m --step $m-narrow; run "FERROLM_MMVQ_WIDE=0 FERROLM_MOE_FUSED=0" $m --step $m-narrow-nomoefuse
  python3 $T/same_logits.py /tmp/$m-step.json /tmp/$m-nomoefuse.json
  python3 $T/same_logits.py /tmp/$m-batch.json /tmp/$m-ungrouped.json
  python3 $T/same_logits.py /tmp/$m-step.json /tmp/$m-narrow.json 0.2
  python3 $T/same_logits.py /tmp/$m-narrow.json /tmp/$m-narrow-nomoefuse.json
done 2>&1 | tee -a $OUT/switches.txt

echo "== serve on CUDA (4 concurrent greedy requests, one batch)"
$B synth --preset smollm2-135m --type q4_k_m --vocab bpe -o /tmp/s135.gguf > /dev/null 2>&1
$B serve -m /tmp/s135.gguf --backend cuda --port 18080 --parallel 4 > $OUT/serve.txt 2>&1 &
sp=$!; for i in $(seq 120); do curl -s -m 1 localhost:18080/health > /dev/null && break; sleep 0.25; done
pids=""
for i in 1 2 3 4; do
  curl -s -m 30 localhost:18080/v1/completions -H 'content-type: application/json' \
    -d '{"model":"s135","prompt":"hello there","max_tokens":16,"temperature":0}' > /tmp/c$i.json &
  pids="$pids $!"
done
wait $pids
python3 -c "import json;r=[json.load(open(f'/tmp/c{i}.json')) for i in range(1,5)];print([x['usage'] for x in r]);print('all equal' if len({x['choices'][0]['text'] for x in r})==1 else 'differ')"
curl -s -m 2 localhost:18080/metrics | grep -E "^ferrolm_(slots_active|generated_tokens_total|batch_steps_total)"
kill $sp
fi

if [ "$PHASE" = bench ]; then
for p in smollm2-1.7b olmoe-1b-7b qwen3-8b; do
  ( [ -s $M/$p.gguf ] || $B synth --preset $p --type q4_k_m -o $M/$p.gguf > /dev/null 2>&1
    echo "synth $p rc=$?" ) &
done
wait
echo "== benchmarks"
for p in smollm2-1.7b qwen3-8b olmoe-1b-7b; do
  timeout 100 $B bench -m $M/$p.gguf --backend cuda -p 512,2048 -n 128 -r 3 2>&1 | grep '|' | tail -3
  timeout 60 $B bench -m $M/$p.gguf --backend cuda -p 2048 -n 0 -r 3 --ubatch-size 2048 2>&1 | tail -1
  echo "FERROLM_MMVQ_WIDE=0:"; FERROLM_MMVQ_WIDE=0 timeout 60 $B bench -m $M/$p.gguf --backend cuda -p 0 -n 128 -r 3 2>&1 | tail -1
done 2>&1 | tee $OUT/bench.txt

echo "== stage breakdowns (FERROLM_CUDA_PROFILE=1: CUDA events per stage, graphs off)"
( FERROLM_CUDA_PROFILE=1 $B bench -m $M/olmoe-1b-7b.gguf --backend cuda -p 2048 -n 0 -r 1 --ubatch-size 2048 2>&1 | grep -v using
  FERROLM_CUDA_PROFILE=1 $B bench -m $M/olmoe-1b-7b.gguf --backend cuda -p 0 -n 32 -r 1 2>&1 | grep -v using
  FERROLM_CUDA_PROFILE=1 $B bench -m $M/smollm2-1.7b.gguf --backend cuda -p 2048 -n 0 -r 1 --ubatch-size 2048 2>&1 | grep -v using
  FERROLM_CUDA_PROFILE=1 $B bench -m $M/qwen3-8b.gguf --backend cuda -p 0 -n 32 -r 1 2>&1 | grep -v using
) > $OUT/profile.txt 2>&1; grep -A14 "stages of" $OUT/profile.txt | head -80
fi
