#!/usr/bin/env bash
# The runner against llama.cpp on the same GGUF files (issue 43, item 5), side by side in one run: prefill (pp, P
# tokens in one batch from an empty cache) and decode (tg, G single-token steps from an empty cache), tokens/s, the
# same threads; each contender REPEATS times, alternated, and the median kept; peak resident memory of each process.
# llama.cpp is built outside the repository (its llama-bench and llama-quantize), e.g.
#   git clone https://github.com/ggml-org/llama.cpp /tmp/llama.cpp && cmake -S /tmp/llama.cpp -B /tmp/llama.cpp/build \
#     -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON && cmake --build /tmp/llama.cpp/build -j --target llama-bench llama-quantize
# and the F32 / Q8_0 / Q4_K_M files made from one GGUF with `llama-quantize --allow-requantize IN OUT TYPE`.
# Usage: bench/lab/llama_cpp_side_by_side.sh LLAMA_BIN_DIR MODEL.gguf... (env THREADS=2 P=512 G=128 REPEATS=3 INT8=0;
# INT8=1: ropekit decodes with 8-bit activations, RunnerOptions::int8_activations, as llama.cpp does)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: llama_cpp_side_by_side.sh LLAMA_BIN_DIR MODEL.gguf...}
shift
threads=${THREADS:-2} p=${P:-512} g=${G:-128} repeats=${REPEATS:-3} int8=${INT8:-0}
rb=build/release/bench/runner_bench
[ -x "$rb" ] || { cmake --preset release >/dev/null && cmake --build --preset release --target runner_bench >/dev/null; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) CPUs); threads $threads; median of $repeats alternated runs"
echo "llama.cpp: $(cd "$bin/../.." 2>/dev/null && git log -1 --format=%h 2>/dev/null || echo unknown)"
echo
echo "| file | weights | MiB | pp$p ropekit / llama.cpp tok/s | ratio | tg$g ropekit / llama.cpp tok/s | ratio | peak RSS ropekit / llama.cpp (× file) |"
echo "|---|---|---|---|---|---|---|---|"
for model in "$@"; do
  : >"$tmp/rp" && : >"$tmp/rt" && : >"$tmp/lp" && : >"$tmp/lt"
  for _ in $(seq "$repeats"); do
    line=$(/usr/bin/time -f "%M" -o "$tmp/rrss" "$rb" "$model" "$threads" "$p" "$g" 1 "$int8")
    sed -n 's/.*| pp[0-9]* \([0-9.]*\) tok\/s .*/\1/p' <<<"$line" >>"$tmp/rp"
    sed -n 's/.*| tg[0-9]* \([0-9.]*\) tok\/s .*/\1/p' <<<"$line" >>"$tmp/rt"
    enc=$(cut -d'|' -f2 <<<"$line" | tr -d ' ')
    /usr/bin/time -f "%M" -o "$tmp/lrss" "$bin/llama-bench" -m "$model" -t "$threads" -p "$p" -n "$g" -r 1 -o csv \
      >"$tmp/l.csv" 2>/dev/null
    python3 - "$tmp/l.csv" "$tmp/lp" "$tmp/lt" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    out = sys.argv[2] if int(r["n_prompt"]) > 0 else sys.argv[3]
    open(out, "a").write(r["avg_ts"] + "\n")
PY
    echo "$(cat "$tmp/rrss") $(cat "$tmp/lrss")" >>"$tmp/rss"
  done
  rp=$(median <"$tmp/rp") rt=$(median <"$tmp/rt") lp=$(median <"$tmp/lp") lt=$(median <"$tmp/lt")
  mib=$(awk -v b="$(stat -c %s "$model")" 'BEGIN {printf "%.0f", b / 1048576}')
  rss=$(awk -v f="$(stat -c %s "$model")" '{r = r > $1 ? r : $1; l = l > $2 ? l : $2} END {printf "%.2f / %.2f", r * 1024 / f, l * 1024 / f}' "$tmp/rss")
  : >"$tmp/rss"
  printf '| %s | %s | %s | %.0f / %.0f | %.2f | %.0f / %.0f | %.2f | %s |\n' "$(basename "$model")" "$enc" "$mib" \
    "$rp" "$lp" "$(awk -v a="$rp" -v b="$lp" 'BEGIN {print a / b}')" "$rt" "$lt" \
    "$(awk -v a="$rt" -v b="$lt" 'BEGIN {print a / b}')" "$rss"
done
