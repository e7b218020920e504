#!/usr/bin/env bash
# Installs ropekit's build and test dependencies from Debian 12's archive, only when missing.
# Everything the build needs comes from here; CMake never downloads anything.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libfmt-dev          # error messages
  nlohmann-json3-dev  # config.json reader, golden-vector tests
  libcli11-dev        # the ropekit command line
  libhwy-dev          # Highway: the SIMD kernels, dispatched at run time
  libbenchmark-dev    # Google Benchmark: bench/rope_bench
  libplplot-dev       # PLplot (SVG driver): `ropekit decay --svg`, `ropekit eval --svg`
  libopenblas-dev     # OpenBLAS: the model runner's matrix products
  libgtest-dev libgmock-dev
  clang libclang-rt-dev  # libFuzzer targets for the parsers of untrusted bytes
  clang-format clang-tidy  # scripts/check-format.sh (the test command), scripts/tidy.sh
  abi-dumper abi-compliance-checker  # ctest's abi.c_api: the C ABI against its recorded baseline
  doxygen             # scripts/reference.sh: the HTML reference (ctest's docs.reference)
  # The Python module (python/): pybind11, Debian's Python 3.11 headers, pip + setuptools + wheel to
  # install it, NumPy and PyTorch (CPU) for its arrays, pytest + Hypothesis for its tests, matplotlib
  # for examples/python.
  python3-dev pybind11-dev python3-pip python3-setuptools python3-wheel
  python3-numpy python3-torch python3-pytest python3-hypothesis python3-matplotlib
)

# --arm64: also the aarch64 cross build's (issue 44; the `arm64` preset, scripts/test-arm64.sh): Debian's cross
# compiler, qemu's user-mode emulator, and the arm64 builds of the libraries through multiarch (installed beside the
# host's; header-only CLI11 and nlohmann-json serve both). PLplot is not co-installable: the Arm CLI has no --svg.
foreign=()
if [ "${1:-}" = "--arm64" ]; then
  packages+=(g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libfmt-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
    libopenblas-dev:arm64)
  dpkg --print-foreign-architectures | grep -qx arm64 || foreign=(arm64)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
[ ${#foreign[@]} -eq 0 ] || "${sudo_cmd[@]}" dpkg --add-architecture arm64
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
