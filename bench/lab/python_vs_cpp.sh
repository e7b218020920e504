#!/usr/bin/env bash
# Issue 63 item 3: the Python lab (python -m ropekit.lab) against the C++ lab (ropekit eval) — the same table, cell
# by cell, every method. Two models:
#   - stories15M (the default): the C++ lab on the llama2.c file, the Python lab on the Hugging Face copy
#     scripts/llama2c_to_hf.py makes (L0 = 256, 24 pairs), the default protocol (5 windows of 2048, N = 128 … 2048);
#   - GGUF=FILE: both labs on the same GGUF file (the C++ runner reads it, transformers dequantizes it with the gguf
#     package), over TEXT (default data/tinystories-valid-excerpt.txt) tokenized by the file's own tokenizer as one
#     BOS-led document, with the protocol in PROTOCOL (default: a declared L0 of 256, one window of 1024,
#     N = 128 … 1024; the comparison needs every method past its L0, not the model's real one, which for
#     SmolLM2-135M (8192) would cost hours on two cores).
#   bench/lab/python_vs_cpp.sh [OUT_DIR]   (MODELS: the folder of stories15M.bin, default ../shared/models;
#                                           PYTHON: a Python with torch, transformers and ropekit (and, for GGUF,
#                                           gguf and accelerate), default the test command's build/torch-venv)
# Needs build/release (./scripts/test.sh or the README's build). Prints the largest relative difference per method.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/python-vs-cpp}
models=${MODELS:-../shared/models}
python=${PYTHON:-build/torch-venv/bin/python}
threads=${THREADS:-2}
methods=${METHODS:-orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,dyn_ntk_stale,llama3,swa,restart,rerope,rerope_logn,self_extend,dca,logn}
ropekit=build/release/tools/ropekit
mkdir -p "$out"
protocol=()
if [ -n "${GGUF:-}" ]; then
  cpp_model=$GGUF
  py_model=$GGUF
  read -r -a protocol <<<"${PROTOCOL:---trained-length 256 --window-size 1024 --windows 1 --lengths 128,256,512,1024}"
  "$python" - "$GGUF" "${TEXT:-data/tinystories-valid-excerpt.txt}" "$out/excerpt.i32" <<'PY'
import sys
import numpy as np
from ropekit.lab import _auto_tokenizer
tok = _auto_tokenizer(sys.argv[1])
ids = [tok.bos_token_id] + tok(open(sys.argv[2], encoding="utf-8").read(), add_special_tokens=False)["input_ids"]
np.asarray(ids, dtype="<i4").tofile(sys.argv[3])
print(f"{sys.argv[3]}: {len(ids)} tokens, BOS {tok.bos_token_id}")
PY
else
  cpp_model=$models/stories15M.bin
  py_model=$out/hf
  "$ropekit" tokenize --tokenizer "$models/tok32000-legacy.bin" --stories --text data/tinystories-valid-excerpt.txt \
    --out "$out/excerpt.i32" >/dev/null
  [ -f "$out/hf/config.json" ] || "$python" scripts/llama2c_to_hf.py "$models/stories15M.bin" "$out/hf"
fi
start=$(date +%s)
"$ropekit" eval --model "$cpp_model" --tokens "$out/excerpt.i32" --threads "$threads" \
  --methods "$methods" "${protocol[@]}" --csv "$out/cpp.csv" >"$out/cpp.txt"
middle=$(date +%s)
"$python" -m ropekit.lab eval --model "$py_model" --tokens "$out/excerpt.i32" --threads "$threads" \
  --methods "$methods" "${protocol[@]}" --csv "$out/python.csv" >"$out/python.txt"
end=$(date +%s)
echo "C++ lab $((middle - start)) s, Python lab $((end - middle)) s ($(lscpu | sed -n 's/^Model name: *//p'))"
"$python" - "$out/cpp.csv" "$out/python.csv" <<'PY'
import csv, sys
cpp, py = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert [(r["method"], r["N"], r["bucket_lo"], r["tokens"]) for r in cpp] == \
    [(r["method"], r["N"], r["bucket_lo"], r["tokens"]) for r in py], "the tables' cells differ"
worst = {}
for a, b in zip(cpp, py):
    rel = abs(float(a["ppl"]) - float(b["ppl"])) / float(a["ppl"])
    worst[a["method"]] = max(worst.get(a["method"], 0.0), rel)
print(f"{len(cpp)} cells; largest relative PPL difference per method:")
for m, w in worst.items():
    print(f"  {m:14s} {w:.2e}{'  OVER 1e-4' if w > 1e-4 else ''}")
sys.exit(1 if max(worst.values()) > 1e-4 else 0)
PY
