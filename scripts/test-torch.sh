#!/usr/bin/env bash
# The Python module under PyTorch 2 from the package index (the path most PyTorch users take), as part of the test
# command (scripts/test.sh): a virtual environment build/torch-venv with pinned torch, transformers, NumPy, pytest
# and Hypothesis (and gguf with accelerate: transformers' GGUF reader, which the lab's GGUF test uses); `pip install .` builds ropekit's wheel there with scikit-build-core and pybind11 from the index
# (the root pyproject.toml; build/wheel keeps its CMake tree between runs) with the C++ operator library built
# against that PyTorch; then python/tests run against the
# installed wheel from outside the repository — the torch.library operators (test_ops.py) and tiny Hugging Face
# models with and without ropekit.torch.patch (test_hf_models.py) included. The first run downloads about 3 GB
# (torch's CUDA wheels are the index's only Linux build); pip's cache makes later ones fast.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$repo/build/torch-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==2.9.1" "transformers==5.15.0" "numpy>=2" pytest hypothesis \
  "scikit-build-core>=0.10" "pybind11>=2.12" "gguf==0.17.1" "accelerate==1.15.0" "pybind11-stubgen==2.5.5" \
  "mypy==1.18.2"
# Without build isolation, so that the build sees this PyTorch and compiles the C++ operator library against it
# (python/torch_ops); an isolated build has no PyTorch and ropekit.ops would register the operators from Python.
# Without the CUDA kernels: nothing here has a GPU to run them on, and the release part has compiled them already.
"$venv/bin/pip" install -q --no-deps --force-reinstall --no-build-isolation \
  --config-settings=build-dir="$repo/build/wheel" --config-settings=cmake.define.ROPEKIT_CUDA=OFF "$repo"
cd "$(mktemp -d)"
"$venv/bin/python" -m ropekit --version
# Typed Python: the compiled module's committed stubs equal what pybind11-stubgen makes of the installed module, and
# a typed user script passes mypy --strict against the installed package (and runs).
"$venv/bin/python" "$repo/scripts/python-stubs.py" --check
"$venv/bin/mypy" --strict --no-incremental "$repo/examples/python/typed_usage.py"
"$venv/bin/python" "$repo/examples/python/typed_usage.py" >/dev/null
ROPEKIT_REPO_DIR=$repo ROPEKIT_EXPECT_OPS=c++ "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests"
# The Python registration of the same operators (what an isolated wheel or another PyTorch gets), same tests.
ROPEKIT_REPO_DIR=$repo ROPEKIT_TORCH_OPS=python ROPEKIT_EXPECT_OPS=python "$venv/bin/python" -m pytest -q \
  -p no:cacheprovider "$repo/python/tests/test_ops.py"
