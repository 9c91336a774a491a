#!/usr/bin/env bash
# The cost of constrained decoding: tg128 (greedy, 128 generated tokens) with and without a JSON
# schema, interleaved so that machine load hits both alike. Prints each run's generation speed
# and the medians.
# Usage: tools/perf/structured_tg.sh BIN [REPS] [THREADS] [extra ferrolm flags, e.g. --backend cuda -m FILE]
set -euo pipefail
bin=${1:?usage: structured_tg.sh BIN [REPS] [THREADS] [flags...]}
reps=${2:-5}
threads=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
schema=$(mktemp --suffix=.json)
trap 'rm -f "$schema"' EXIT
# An array far longer than 128 tokens, so the grammar never ends the run early.
echo '{"type":"array","items":{"type":"integer","minimum":0,"maximum":999},"minItems":400}' >"$schema"
prompt="Count from 1 to 400, separated by commas: 1, 2, 3,"
speed() { # prints "n_gen t/s [mask figures]" from the speed line
  "$bin" run -p "$prompt" -n 128 --temp 0 -t "$threads" "$@" 2>&1 >/dev/null |
    sed -n 's/.*generation: \([0-9]*\) tokens, \([0-9.]*\) t\/s\(.*\)/\1 \2 \3/p'
}
plain=(); constrained=()
for i in $(seq "$reps"); do
  read -r n p < <(speed "$@"); echo "run $i plain:       $n tokens, $p t/s"; plain+=("$p")
  read -r n c rest < <(speed "$@" --json-schema "$schema"); echo "run $i json-schema: $n tokens, $c t/s $rest"; constrained+=("$c")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mp=$(median "${plain[@]}"); mc=$(median "${constrained[@]}")
echo "median tg128: plain $mp t/s, json-schema $mc t/s, cost $(awk -v p="$mp" -v c="$mc" 'BEGIN {printf "%.1f", (1 - c/p)*100}')%"
