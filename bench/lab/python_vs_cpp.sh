#!/usr/bin/env bash
# Issue 63 item 3: the Python lab (python -m ropekit.lab, on a Hugging Face copy of the model made by
# scripts/llama2c_to_hf.py) against the C++ lab (ropekit eval, on the llama2.c file) — the same table, cell by cell —
# on stories15M (L0 = 256, 24 pairs), every method, the default protocol (5 windows of 2048, N = 128 … 2048).
#   bench/lab/python_vs_cpp.sh [OUT_DIR]   (MODELS: the folder of stories15M.bin, default ../shared/models;
#                                           PYTHON: a Python with torch, transformers and ropekit, default the test
#                                           command's build/torch-venv)
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
"$ropekit" tokenize --tokenizer "$models/tok32000-legacy.bin" --stories --text data/tinystories-valid-excerpt.txt \
  --out "$out/excerpt.i32" >/dev/null
[ -f "$out/hf/config.json" ] || "$python" scripts/llama2c_to_hf.py "$models/stories15M.bin" "$out/hf"
start=$(date +%s)
"$ropekit" eval --model "$models/stories15M.bin" --tokens "$out/excerpt.i32" --threads "$threads" \
  --methods "$methods" --csv "$out/cpp.csv" >"$out/cpp.txt"
middle=$(date +%s)
"$python" -m ropekit.lab eval --model "$out/hf" --tokens "$out/excerpt.i32" --threads "$threads" \
  --methods "$methods" --csv "$out/python.csv" >"$out/python.txt"
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
