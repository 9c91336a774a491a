source tools/device/carried.sh
t0=$(date +%s)
for P in olmoe-1b-7b qwen3-30b-a3b qwen3-8b; do
  [ -s $M/$P-pooled.gguf ] || $B synth --preset $P --type q4_k_m --pooled -o $M/$P-pooled.gguf > /dev/null 2>&1 &
done
wait
for P in olmoe-1b-7b qwen3-30b-a3b; do
  F=$M/$P-pooled.gguf
  echo "== $P llama-batched-bench at $(( $(date +%s) - t0 )) s"
  timeout 90 $L/llama-batched-bench -m $F -ngl 99 -fa 1 -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\|' | tail -3
  for s in FERROLM_F16_DECODE_FIRST=1 FERROLM_F16_DECODE_FIRST=0; do
    echo "== $P ferrolm $s"
    env $s timeout 60 $B bench -m $F --backend cuda -c 20000 -npp 128 -ntg 128 -npl 8,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
  done
done
echo "== qwen3-8b ferrolm default (DECODE_FIRST on) at $(( $(date +%s) - t0 )) s"
timeout 60 $B bench -m $M/qwen3-8b-pooled.gguf --backend cuda -c 20000 -npp 128 -ntg 128 -npl 16,32,64 2>&1 | grep -E '^\| +[0-9]|rror|panic'
echo "at $(( $(date +%s) - t0 )) s"
bash tools/device/depth_check.sh
