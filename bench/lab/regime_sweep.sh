#!/usr/bin/env bash
# The full-context search of docs/lab.md: every position-regime method (ReRoPE, SelfExtend, dual-chunk
# attention, log-n scaling) over a grid of its parameters, read at N = 4096 (8× the bundled model's
# trained length) beside the `restart` baseline and the `swa` window, in one `ropekit eval` command.
# Usage: bench/lab/regime_sweep.sh [OUT_DIR=build/lab-sweep] [THREADS=2]
# Writes OUT_DIR/sweep.csv (the lab's CSV), sweep.svg and the text table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/lab-sweep}
threads=${2:-2}
rk=build/release/tools/ropekit
[ -x "$rk" ] || { cmake --preset release >/dev/null && cmake --build --preset release --target ropekit_tool >/dev/null; }
mkdir -p "$out"
"$rk" tokenize --tokenizer models/tok512.bin --text data/tinystories-valid-excerpt.txt --stories \
    --out "$out/excerpt.i32" >/dev/null
methods=(
  restart swa
  rerope:w=64 rerope:w=128 rerope rerope:w=384 rerope:w=448 rerope:w=511
  rerope_logn rerope:w=448,logn=1
  self_extend:W=64,G=8 self_extend self_extend:W=128,G=16 self_extend:W=256,G=8 self_extend:W=256,G=16
  self_extend:W=384,G=32 self_extend:W=256,G=16,logn=1
  dca dca:local=64 dca:local=128 dca:chunk=384,local=12 dca:chunk=256,local=8 dca:logn=1
  logn
)
list=$(IFS=,; echo "${methods[*]}")
"$rk" eval --model models/tinystories-260k.bin --tokens "$out/excerpt.i32" --lengths 4096 \
    --methods "$list" --threads "$threads" --csv "$out/sweep.csv" --svg "$out/sweep.svg" 2>/dev/null
