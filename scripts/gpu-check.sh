#!/usr/bin/env bash
# The device checks of issue 41, as one prepared run on a machine with an NVIDIA GPU (minutes, not hours):
# configures and builds the CUDA build for sm_90 only (build/gpu), runs the CUDA tests (ctest -L cuda: the rotation
# kernel over the rotation case table against the scalar reference, the public DeviceRope on a stream of its own,
# the fused append's 720 cases against the CPU's AppendCall and the K-shift's against PagedKvCache, bit for bit),
# runs them again under compute-sanitizer's memcheck when it is installed, runs bench/cuda_bench (GB/s against a
# device-to-device copy in the same run; JSON kept), and writes a summary (GPU, driver, CUDA, each step's result and
# time) and the logs to the results folder given as the first argument (default build/gpu-results). The host-side checks of the same kernel
# bodies run in the ordinary test command on every machine (tests/cuda_host_test.cpp).
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
step configure cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DROPEKIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DROPEKIT_BUILD_PYTHON=OFF -DROPEKIT_BUILD_EXAMPLES=OFF || exit 1
step build cmake --build build/gpu --target cuda_device_test cuda_host_test cuda_bench || exit 1
step host ctest --test-dir build/gpu -R CudaHost --output-on-failure -V
step device ctest --test-dir build/gpu -L cuda --output-on-failure -V
if command -v compute-sanitizer > /dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 build/gpu/tests/cuda_device_test
else
  echo "memcheck     compute-sanitizer not installed" | tee -a "$summary"
fi
step bench build/gpu/bench/cuda_bench --json "$out/cuda_bench.json"
grep -h "equal the" "$out"/device.log "$out"/host.log 2>/dev/null | tee -a "$summary"
grep "of the copy" "$out/bench.log" 2>/dev/null | tee -a "$summary"
