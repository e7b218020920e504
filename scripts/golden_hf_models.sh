#!/usr/bin/env bash
# Regenerates tests/data/hf_models/ (tiny random-weight Hugging Face checkpoints and transformers' float32 logits for
# them; scripts/golden_hf_models.py says what each holds) and tests/data/quants/ (ggml's quantized blocks and the gguf
# package's dequantization of them; scripts/golden_quants.py). Not run by the tests: a virtual environment with pinned
# transformers 5.15.0, torch 2.9.1 (CPU) and gguf 0.17.1 from the Python package index, then the scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-build/golden-venv}
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.9.1" "transformers==5.15.0" "safetensors==0.8.0" "gguf==0.17.1" numpy
rm -rf tests/data/hf_models/*/  # the models; README.md stays
"$venv/bin/python" scripts/golden_hf_models.py --out tests/data/hf_models
rm -f tests/data/hf_models/*/generation_config.json
chmod 644 tests/data/hf_models/*/*
"$venv/bin/python" scripts/golden_quants.py --out tests/data/quants
