#!/usr/bin/env bash
# The model runner against llama2.c's run.c on the bundled checkpoint, side by side in one run:
#   decode      `ropekit generate` vs run.c, 512 steps from BOS at temperature 0 (the same text), tokens/s
#   eval read   `ropekit eval` reading 512-token windows in one batch vs run.c's token-at-a-time speed
#   full table  the default `ropekit eval` (every built-in method × 5 lengths × 5 windows), seconds
# run.c is built outside the repository from github.com/karpathy/llama2.c with its Makefile's flags:
#   runfast: gcc -Ofast -o run_fast run.c -lm          runomp: gcc -Ofast -fopenmp -march=native run.c -lm -o run_omp
# Usage: bench/lab/lab_bench.sh DIR_WITH_run_fast_AND_run_omp [THREADS=2] [REPEATS=5]
# Each contender runs REPEATS times, interleaved; the table gives the median. Results: docs/performance-log.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
runc_dir=${1:?usage: lab_bench.sh DIR_WITH_run_fast_AND_run_omp [THREADS] [REPEATS]}
threads=${2:-2}
repeats=${3:-5}
rk=build/release/tools/ropekit
model=models/tinystories-260k.bin
tok=models/tok512.bin
[ -x "$rk" ] || { cmake --preset release >/dev/null && cmake --build --preset release --target ropekit_tool >/dev/null; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$rk" tokenize --tokenizer "$tok" --text data/tinystories-valid-excerpt.txt --stories --out "$tmp/excerpt.i32" >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
runc_tps() { OMP_NUM_THREADS=$threads "$runc_dir/$1" "$model" -z "$tok" -t 0 -n 512 2>&1 >/dev/null | sed -n 's/achieved tok\/s: //p'; }
rk_decode_tps() { "$rk" generate --model "$model" --tokenizer "$tok" --temperature 0 --steps 512 --threads "$1" 2>&1 >/dev/null |
                  sed -n 's/achieved tok\/s: \([0-9.]*\).*/\1/p'; }
rk_eval_tps() { "$rk" eval --model "$model" --tokens "$tmp/excerpt.i32" --window-size 512 --windows 5 --lengths 512 \
                  --buckets 0 --methods orig --threads "$threads" 2>/dev/null | sed -n 's/.*s (\([0-9.]*\) tokens\/s)/\1/p'; }

for i in $(seq "$repeats"); do
  runc_tps run_fast >>"$tmp/runc_fast"
  runc_tps run_omp >>"$tmp/runc_omp"
  rk_decode_tps 1 >>"$tmp/rk_decode_1"
  rk_decode_tps "$threads" >>"$tmp/rk_decode_t"
  rk_eval_tps >>"$tmp/rk_eval"
done
start=$(date +%s.%N)
"$rk" eval --model "$model" --tokens "$tmp/excerpt.i32" --threads "$threads" >"$tmp/full.txt" 2>/dev/null
full=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')

fast=$(median <"$tmp/runc_fast")
omp=$(median <"$tmp/runc_omp")
best=$(printf '%s\n%s\n' "$fast" "$omp" | sort -g | tail -1)
d1=$(median <"$tmp/rk_decode_1")
dt=$(median <"$tmp/rk_decode_t")
ev=$(median <"$tmp/rk_eval")
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; threads $threads; median of $repeats interleaved runs"
echo
echo "| measure | ropekit | run.c runfast | run.c runomp ($threads thr) | ropekit / best run.c | target |"
echo "|---|---|---|---|---|---|"
printf '| decode tok/s, 1 thread | %.0f | %.0f | %.0f | %.2f | ≥ 1 |\n' "$d1" "$fast" "$omp" "$(awk -v a="$d1" -v b="$best" 'BEGIN {print a / b}')"
printf '| decode tok/s, %s threads | %.0f | %.0f | %.0f | %.2f | ≥ 1 |\n' "$threads" "$dt" "$fast" "$omp" "$(awk -v a="$dt" -v b="$best" 'BEGIN {print a / b}')"
printf '| eval reading tok/s (512-token windows, one batch) | %.0f | %.0f | %.0f | %.2f | ≥ 5 |\n' "$ev" "$fast" "$omp" "$(awk -v a="$ev" -v b="$best" 'BEGIN {print a / b}')"
printf '| full default eval table, seconds (%s threads) | %.1f | | | | ≤ 60 |\n' "$threads" "$full"
