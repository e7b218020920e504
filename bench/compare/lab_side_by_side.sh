#!/usr/bin/env bash
# The lab's speed against its peers on stories15M, alternately in one run (README.md here, issue 38 item 6):
#   eval     `ropekit eval`, one method (orig), windows of N tokens — against llama.cpp's llama-perplexity -c N
#            on the same checkpoint converted by llama.cpp's own llama2.c converter;
#   decode   `ropekit generate --temperature 0` — against llama2.c's run.c (and its OpenMP build for 2 threads).
# Both peers are built outside the repository; this script only runs them. Usage:
#   bench/compare/lab_side_by_side.sh LLAMA_BIN_DIR RUN_C_DIR [rounds]
# LLAMA_BIN_DIR holds llama-perplexity; RUN_C_DIR holds run (and runomp); STORIES15M_GGUF (default
# /tmp/stories15M-spm.gguf) is the converted model, MODELS (default ../shared/models) the llama2.c files.
set -euo pipefail
cd "$(dirname "$0")/../.."
llama=${1:?LLAMA_BIN_DIR}
runc=${2:?RUN_C_DIR}
rounds=${3:-3}
models=${MODELS:-../shared/models}
gguf=${STORIES15M_GGUF:-/tmp/stories15M-spm.gguf}
ropekit=build/release/tools/ropekit
text=data/tinystories-valid-excerpt.txt
tokens=$(mktemp)
trap 'rm -f "$tokens"' EXIT
"$ropekit" tokenize --tokenizer "$models/tok32000-legacy.bin" --stories --text "$text" --out "$tokens" >/dev/null

echo "host: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); $(nproc) CPUs; ropekit $(git rev-parse --short HEAD)"
echo "what,threads,N,round,positions_per_s,scored_per_s"
for round in $(seq "$rounds"); do
  for threads in 1 2; do
    for n in 256 2048; do
      # ropekit: every position of each window is forwarded and scored.
      out=$("$ropekit" eval --model "$models/stories15M.bin" --tokens "$tokens" --methods orig --lengths "$n" \
        --window-size "$n" --buckets 0 $((n / 2)) "$n" --threads "$threads" 2>&1)
      pos=$(sed -n 's/^\([0-9]*\) model positions in \([0-9.]*\) s.*/\1 \2/p' <<<"$out")
      read -r count secs <<<"$pos"
      awk -v c="$count" -v s="$secs" -v t="$threads" -v n="$n" -v r="$round" \
        'BEGIN { printf "ropekit eval,%d,%d,%d,%.0f,%.0f\n", t, n, r, c / s, c / s }'
      # llama-perplexity: chunks of n tokens, logits (and scores) for the second half of each only.
      line=$("$llama/llama-perplexity" -m "$gguf" -f "$text" -c "$n" -b "$n" -ub "$n" -t "$threads" 2>&1 |
        grep "prompt eval time")
      tps=$(sed -n 's/.*, *\([0-9.]*\) tokens per second.*/\1/p' <<<"$line")
      awk -v p="$tps" -v t="$threads" -v n="$n" -v r="$round" \
        'BEGIN { printf "llama-perplexity,%d,%d,%d,%.0f,%.0f\n", t, n, r, p, p / 2 }'
    done
    # Decode: 256 positions from BOS, greedy.
    rk=$("$ropekit" generate --model "$models/stories15M.bin" --tokenizer "$models/tok32000-legacy.bin" \
      --temperature 0 --steps 256 --threads "$threads" 2>&1 >/dev/null | sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p')
    echo "ropekit generate,$threads,256,$round,$rk,"
    bin=$runc/run
    [ "$threads" -gt 1 ] && bin=$runc/runomp
    rc=$(OMP_NUM_THREADS=$threads "$bin" "$models/stories15M.bin" -z "$models/tok32000-legacy.bin" -t 0 -n 256 2>&1 |
      sed -n 's/.*achieved tok\/s: \([0-9.]*\).*/\1/p')
    echo "run.c,$threads,256,$round,$rc,"
  done
done
