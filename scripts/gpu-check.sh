#!/usr/bin/env bash
# The device checks of issue 41, as one prepared run on a machine with an NVIDIA GPU (minutes, not hours):
# configures and builds the CUDA build for sm_90 only (build/gpu), runs the CUDA tests (ctest -L cuda: the rotation
# kernel over the rotation case table against the scalar reference, the public DeviceRope on a stream of its own,
# the fused append's 720 cases against the CPU's AppendCall and the K-shift's against PagedKvCache, bit for bit),
# runs them again under compute-sanitizer's memcheck when it is installed, runs bench/cuda_bench (GB/s against a
# device-to-device copy in the same run; JSON kept), and writes a summary (GPU, driver, CUDA, each step's result and
# time) and the logs to the results folder given as the first argument (default build/gpu-results); then the PyTorch
# peers (bench/python/bench_cuda_torch.py), CUDA tensors through the PyTorch operators (python/tests/test_cuda_ops.py)
# and their cost from Python (bench/python/bench_cuda_ops.py) where the machine's torch sees the GPU. With FlashInfer's
# headers carried (.gpudeps/flashinfer), cuda_bench also times FlashInfer's own kernels on the same tensors and
# measures both libraries' angles at long positions. The host-side checks of the same kernel bodies run in the
# ordinary test command on every machine (tests/cuda_host_test.cpp).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu-results}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
step() {
  local name=$1 start=$SECONDS rc
  shift
  "$@" > "$out/$name.log" 2>&1
  rc=$?
  printf '%-12s rc=%d  %4d s\n' "$name" "$rc" $((SECONDS - start)) | tee -a "$summary"
  return $rc
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: none"
  nvcc --version 2>&1 | tail -1
  lscpu | grep -m1 "Model name"
} | tee -a "$summary"
# The GPU machines reach no package archive, and their image has CUDA, CMake and ninja but not Debian's -dev
# packages the library builds against. The caller carries them as .deb files in .gpudeps/ (ignored by git), made on a
# Debian 12 machine with:
#   mkdir -p .gpudeps && cd .gpudeps && apt-get download libhwy-dev libhwy1 libfmt-dev libfmt9 nlohmann-json3-dev \
#     libgtest-dev libgmock-dev googletest libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev \
#     pkgconf pkgconf-bin libpkgconf3 libgfortran5
# (14 MiB); they are unpacked into a prefix of their own, never over /. The build leaves out the CLI (CLI11, PLplot).
prefix_args=()
if [ -d .gpudeps ] && ! { command -v pkg-config > /dev/null && pkg-config --exists libhwy fmt openblas; }; then
  deps=/tmp/ropekit-gpudeps
  mkdir -p "$deps"
  for f in .gpudeps/*.deb; do
    if command -v dpkg > /dev/null; then dpkg -x "$f" "$deps"; else ar p "$f" data.tar.xz | tar -xJ -C "$deps"; fi
  done
  lib=$deps/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # pkg-config's answers name /usr/...: the sysroot moves them into the prefix.
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$deps/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$deps
  command -v pkg-config > /dev/null || prefix_args+=(-DPKG_CONFIG_EXECUTABLE="$deps/usr/bin/pkgconf")
  prefix_args+=(-DCMAKE_PREFIX_PATH="$deps/usr")
  echo "dependencies unpacked from .gpudeps into $deps" | tee -a "$summary"
fi
# FlashInfer's own kernels beside ropekit's in cuda_bench (its rows "flashinfer ...", and the angles' accuracy at
# long positions), where its headers were carried in .gpudeps/flashinfer (scripts/flashinfer-headers.sh, 21 MiB).
if [ -f .gpudeps/flashinfer/include/flashinfer/pos_enc.cuh ]; then
  prefix_args+=(-DROPEKIT_FLASHINFER_DIR="$PWD/.gpudeps/flashinfer")
  echo "flashinfer   $(cat .gpudeps/flashinfer/VERSION 2> /dev/null) headers from .gpudeps/flashinfer" | tee -a "$summary"
fi
step configure cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DROPEKIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DROPEKIT_BUILD_PYTHON=OFF -DROPEKIT_BUILD_EXAMPLES=OFF -DROPEKIT_BUILD_TOOLS=OFF \
  "${prefix_args[@]}" || { tail -30 "$out/configure.log"; exit 1; }
step build cmake --build build/gpu --target cuda_device_test cuda_host_test cuda_bench || { tail -40 "$out/build.log"; exit 1; }
step host ctest --test-dir build/gpu -R CudaHost --output-on-failure -V
step device ctest --test-dir build/gpu -L cuda --output-on-failure -V --timeout 120
# ROPEKIT_GPU_QUICK=1: the C++ tests and the benchmark only (a rerun after a fix, when device minutes are short: no
# memcheck, PyTorch peers or Python build); ROPEKIT_GPU_TORCH=0: everything but the PyTorch peers; ROPEKIT_GPU_PYTHON=0:
# everything but the Python build and its tests.
quick=${ROPEKIT_GPU_QUICK:-0}
if [ "$quick" = 1 ]; then
  echo "memcheck     skipped (ROPEKIT_GPU_QUICK=1)" | tee -a "$summary"
elif command -v compute-sanitizer > /dev/null; then
  step memcheck timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 build/gpu/tests/cuda_device_test
else
  echo "memcheck     compute-sanitizer not installed" | tee -a "$summary"
fi
step bench timeout 240 build/gpu/bench/cuda_bench --json "$out/cuda_bench.json"
# The peers on the same GPU: Hugging Face's expression in PyTorch, eager and torch.compile (the device image's torch).
if [ "$quick" = 1 ] || [ "${ROPEKIT_GPU_TORCH:-1}" = 0 ]; then
  echo "torch        skipped (ROPEKIT_GPU_QUICK=1 or ROPEKIT_GPU_TORCH=0)" | tee -a "$summary"
elif python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  step torch timeout 300 python3 bench/python/bench_cuda_torch.py --json "$out/torch_bench.json"
else
  echo "torch        no PyTorch with CUDA here" | tee -a "$summary"
fi
# CUDA tensors through the PyTorch operators (python/tests/test_cuda_ops.py), where the machine's torch sees the GPU
# and its Python has development headers: pybind11 and pytest come as wheels in .gpudeps/wheels (made here with
# `pip download -d .gpudeps/wheels pybind11==2.13.6 pytest==8.3.5`), unpacked, not installed.
pyinc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2> /dev/null)
if [ "$quick" = 1 ] || [ "${ROPEKIT_GPU_PYTHON:-1}" = 0 ]; then
  echo "python       skipped (ROPEKIT_GPU_QUICK=1 or ROPEKIT_GPU_PYTHON=0)" | tee -a "$summary"
elif ! python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  echo "python       no PyTorch with CUDA here" | tee -a "$summary"
elif [ ! -f "$pyinc/Python.h" ] || ! ls .gpudeps/wheels/pybind11-*.whl > /dev/null 2>&1; then
  echo "python       no Python.h ($pyinc) or no .gpudeps/wheels/pybind11-*.whl" | tee -a "$summary"
else
  pylibs=/tmp/ropekit-pylibs
  python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('$pylibs') for w in glob.glob('.gpudeps/wheels/*.whl')]"
  pybind11_dir=$(PYTHONPATH=$pylibs python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')
  if step python-build bash -c "cmake -S . -B build/gpu-python -G Ninja -DCMAKE_BUILD_TYPE=Release -DROPEKIT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DROPEKIT_BUILD_PYTHON=ON -DROPEKIT_BUILD_EXAMPLES=OFF -DROPEKIT_BUILD_TOOLS=OFF \
    -DPython_EXECUTABLE=$(command -v python3) -Dpybind11_DIR=$pybind11_dir ${prefix_args[*]} &&
    cmake --build build/gpu-python --target ropekit_python ropekit_torch_ops"; then
    step python env PYTHONPATH="build/gpu-python/python:$pylibs" ROPEKIT_EXPECT_OPS=c++ timeout 300 python3 -m pytest -q -rs \
      -p no:cacheprovider python/tests/test_cuda_ops.py python/tests/test_ops.py
    tail -3 "$out/python.log" 2> /dev/null | tee -a "$summary"
    # What a call costs from Python, against a CUDA graph's replay of it and the compiled expression.
    step ops-bench env PYTHONPATH="build/gpu-python/python:$pylibs" timeout 120 python3 bench/python/bench_cuda_ops.py \
      --json "$out/ops_bench.json"
    grep "rotate_ eager" "$out/ops-bench.log" 2> /dev/null | tee -a "$summary"
  fi
fi
grep -h "equal the" "$out"/device.log "$out"/host.log 2>/dev/null | tee -a "$summary"
grep -e "of the copy" -e "^accuracy" "$out/bench.log" 2>/dev/null | tee -a "$summary"
