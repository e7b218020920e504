#!/usr/bin/env bash
# Regenerates tests/data/mrope/ (HF's get_rope_index), tests/data/vision/ (HF's vision rotary) and
# tests/data/golden/hf/hunyuan_alpha.json (HF's HunYuan rotary) from Hugging Face transformers' own code (not run
# by the tests):
# a virtual environment with transformers 5.15.0 and torch 2.9.1 from the Python package index, transformers
# 4.57.1 (with the huggingface-hub and tokenizers it requires) in a folder beside it for the older rule.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-build/golden-venv}
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.9.1" "transformers==5.15.0" numpy requests
"$venv/bin/pip" install -q --target "$venv/transformers-4.57.1" --no-deps "transformers==4.57.1" \
  "huggingface-hub==0.35.3" "tokenizers==0.22.1"
mkdir -p tests/data/mrope
"$venv/bin/python" scripts/golden_mrope.py --rule token_types --out tests/data/mrope/token_types.json
PYTHONPATH="$venv/transformers-4.57.1" "$venv/bin/python" scripts/golden_mrope.py --rule token_scan \
  --out tests/data/mrope/token_scan.json
"$venv/bin/python" scripts/golden_hunyuan.py --out tests/data/golden/hf/hunyuan_alpha.json
mkdir -p tests/data/vision
"$venv/bin/python" scripts/golden_vision.py --out tests/data/vision/vision_rope.json
"$venv/bin/python" scripts/golden_glm_mrope.py --out tests/data/mrope/glm_text_rotary.json
