#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): installs dependencies, checks that the tree is formatted
# (and has no "../" includes), then configures, builds and runs ctest (two jobs) for
#   release  optimised, -Werror, with the Python module: every label (unit, target, slow, python, package),
#            then clang-tidy on its compile commands against the recorded baseline (scripts/tidy.sh)
#   dev      Debug + AddressSanitizer + UndefinedBehaviorSanitizer, without OpenMP, -Werror, built with CMake's
#            default generator (Unix Makefiles) like a plain `cmake -S . -B build && cmake --build build`: the unit
#            and target labels (the slow one ran in release), the case tables' attention rows shrunk by 4
#            (ROPEKIT_CASE_SHRINK: every row kept, tests/targets.hpp), the CUDA kernels for sm_90 alone
#   tsan     clang ThreadSanitizer without OpenMP (Highway's static target only: the races are not per target): the
#            concurrency tests, one per thread-safety sentence of the headers and the C API, the Python module's
#            (python/tests/test_threads.py in the instrumented module, the runtime preloaded into CPython), and a
#            control race for each that must be reported
#   fuzz     clang libFuzzer targets for the parsers of untrusted bytes, 20 s each with ASan + UBSan
#   torch    the Python module as a wheel (scikit-build-core) under PyTorch 2.9 and transformers 5.15 from the
#            package index, in build/torch-venv (scripts/test-torch.sh)
#   arm64    the aarch64 cross build, its SIMD targets' tests at SVE vector lengths 128/256/512 (case tables shrunk
#            and shared by the targets of a length; `scripts/test-arm64.sh --full` runs them whole) and the unit tier
#            under qemu-aarch64 (scripts/test-arm64.sh; its time per vector length printed at the end)
# and prints how long each part took. Every test reads the repository's own data (tests/data/, models/,
# data/): a clone alone passes. After a change, the quick tier is `cmake --workflow --preset quick`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --arm64
# The dev part builds with CMake's default generator (Unix Makefiles: what a plain `cmake -S . -B build` gets), the
# others with Ninja, so that a configure or build step only one generator accepts fails here. Make builds one job at
# a time unless told; a build folder left by an earlier Ninja configure is made again.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
if grep -qs '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/dev/CMakeCache.txt; then rm -rf build/dev; fi
timings=()
part() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%-8s %4d s' "$name" $((SECONDS - start)))")
  echo "test.sh: $name passed in $((SECONDS - start)) s ($SECONDS s so far)"
}
part format ./scripts/check-format.sh
part release cmake --workflow --preset release
part tidy ./scripts/tidy.sh
part dev cmake --workflow --preset dev
part tsan cmake --workflow --preset tsan
part fuzz cmake --workflow --preset fuzz
part torch ./scripts/test-torch.sh
part arm64 ./scripts/test-arm64.sh
echo "test.sh: every part passed in $SECONDS s:"
printf '  %s\n' "${timings[@]}"
if [ -f build/arm64/times.txt ]; then sed "s/^/    arm64: /" build/arm64/times.txt; fi
