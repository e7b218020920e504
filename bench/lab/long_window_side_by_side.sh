#!/usr/bin/env bash
# Issue 63 item 5: one long window of a real GGUF model in the C++ lab (`ropekit eval`) beside llama.cpp's
# `llama-perplexity -c N` on the same file, alternated, the same threads: positions per second, the perplexity of
# the window's second half (the part llama-perplexity scores), and each process's peak resident memory.
#   bench/lab/long_window_side_by_side.sh LLAMA_BIN_DIR MODEL.gguf [N]   (N: 16384 by default)
# Environment: THREADS (2), ROUNDS (1), TEXT (data/tinystories-valid-excerpt.txt, its story separators as blank lines,
# repeated until it holds 2·N tokens, as llama-perplexity asks), PYTHON (a Python with transformers, gguf and ropekit: build/torch-venv by default),
# OUT (build/long-window). llama.cpp is built outside the repository (e.g. from the llama.cpp sources vendored in the
# llama-cpp-python sdist on the package index: cmake -DGGML_NATIVE=ON, target llama-perplexity).
set -euo pipefail
cd "$(dirname "$0")/../.."
llama=${1:?usage: long_window_side_by_side.sh LLAMA_BIN_DIR MODEL.gguf [N]}
model=${2:?usage: long_window_side_by_side.sh LLAMA_BIN_DIR MODEL.gguf [N]}
n=${3:-16384}
threads=${THREADS:-2} rounds=${ROUNDS:-1}
python=${PYTHON:-build/torch-venv/bin/python}
out=${OUT:-build/long-window}
ropekit=build/release/tools/ropekit
mkdir -p "$out"
# The same tokens for both: the text repeated, tokenized by the file's own tokenizer (transformers reading the GGUF;
# llama.cpp tokenizes the same text with its reading of the same tokenizer), one BOS.
"$python" - "$model" "${TEXT:-data/tinystories-valid-excerpt.txt}" "$n" "$out/text.txt" "$out/tokens.i32" <<'PY'
import sys
import numpy as np
from ropekit.lab import _auto_tokenizer
model, source, n, text_out, ids_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
tok = _auto_tokenizer(model)
# The excerpt's story separators are a special token to transformers' tokenizer but plain text to llama-perplexity's
# (it tokenizes without parsing special tokens): a blank line instead, so that both read the same tokens.
piece = open(source, encoding="utf-8").read().replace("<|endoftext|>", "\n\n")
text = piece
while len(tok(text, add_special_tokens=False)["input_ids"]) < 2 * n + 1:
    text += piece
open(text_out, "w", encoding="utf-8").write(text)
ids = [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
np.asarray(ids, dtype="<i4").tofile(ids_out)
print(f"{len(ids)} tokens", file=sys.stderr)
PY
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model" \
  "$(lscpu | sed -n 's/^Model: *//p'); $(nproc) CPUs; $threads threads; ropekit $(git rev-parse --short HEAD); N = $n"
echo
echo "| round | contender | positions/s | PPL of positions N/2 … N−1 | peak RSS MiB |"
echo "|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  /usr/bin/time -f "%M" -o "$out/rk.rss" "$ropekit" eval --model "$model" --tokens "$out/tokens.i32" --methods orig \
    --lengths "$n" --window-size "$n" --windows 1 --buckets 0 $((n / 2)) "$n" --threads "$threads" \
    --csv "$out/rk.csv" >"$out/rk.txt" 2>&1
  rate=$(sed -n 's/^[0-9]* model positions in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p' "$out/rk.txt")
  ppl=$(awk -F, -v h=$((n / 2)) '$4 == h { print $8 }' "$out/rk.csv")
  echo "| $round | ropekit eval | $rate | $ppl | $(($(cat "$out/rk.rss") / 1024)) |"
  # llama-perplexity: one chunk of N tokens (BOS first), logits for its second half, in batches of N (ubatch: its
  # default).
  /usr/bin/time -f "%M" -o "$out/lc.rss" "$llama/llama-perplexity" -m "$model" -f "$out/text.txt" -c "$n" -b "$n" \
    --chunks 1 -t "$threads" >"$out/lc.txt" 2>&1
  # Its own timing of the pass (the N positions of the chunk; it reports no per-token rate).
  rate=$(sed -n 's/.* \([0-9.]*\) seconds per pass.*/\1/p' "$out/lc.txt" | awk -v n="$n" '{ printf "%.0f", n / $1 }')
  ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$out/lc.txt")
  echo "| $round | llama-perplexity | $rate | $ppl | $(($(cat "$out/lc.rss") / 1024)) |"
done
