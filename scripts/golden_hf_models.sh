#!/usr/bin/env bash
# Regenerates tests/data/hf_models/ (tiny random-weight Hugging Face checkpoints and transformers' float32 logits for
# them; scripts/golden_hf_models.py says what each holds). Not run by the tests: a virtual environment with pinned
# transformers 5.15.0 and torch 2.9.1 (CPU) from the Python package index, then the script.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-build/golden-venv}
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.9.1" "transformers==5.15.0" "safetensors==0.8.0" numpy
rm -rf tests/data/hf_models
"$venv/bin/python" scripts/golden_hf_models.py --out tests/data/hf_models
rm -f tests/data/hf_models/*/generation_config.json
chmod 644 tests/data/hf_models/*/*
