#!/usr/bin/env bash
# The Python module under PyTorch 2 from the package index (the path most PyTorch users take), as part of the test
# command (scripts/test.sh): a virtual environment build/torch-venv with pinned torch, transformers, NumPy, pytest
# and Hypothesis; `pip install .` builds ropekit's wheel there with scikit-build-core and pybind11 from the index
# (the root pyproject.toml; build/wheel keeps its CMake tree between runs); then python/tests run against the
# installed wheel from outside the repository — the torch.library operators (test_ops.py) and tiny Hugging Face
# models with and without ropekit.torch.patch (test_hf_models.py) included. The first run downloads about 3 GB
# (torch's CUDA wheels are the index's only Linux build); pip's cache makes later ones fast.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$repo/build/torch-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.9.1" "transformers==5.15.0" "numpy>=2" pytest hypothesis
"$venv/bin/pip" install -q --no-deps --force-reinstall --config-settings=build-dir="$repo/build/wheel" "$repo"
cd "$(mktemp -d)"
"$venv/bin/python" -m ropekit --version
ROPEKIT_REPO_DIR=$repo "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests"
