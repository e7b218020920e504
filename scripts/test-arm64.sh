#!/usr/bin/env bash
# ropekit on Arm (issue 44), as part of the test command (scripts/test.sh): cross-builds the library, its tests and the
# CLI for aarch64 (the `arm64` preset: Debian's g++-aarch64-linux-gnu against the arm64 packages that
# `install-deps.sh --arm64` adds through multiarch) and runs them under qemu-aarch64 (user mode):
#   - every SIMD target's tests (gtest Targets/*: the rotation case table bit for bit against the scalar reference,
#     guard regions included, every bf16/fp16 pattern, the angle rows; attention, linear attention, the KV caches and
#     the fused append within their contracts) of every test program that has them, once per SVE vector length:
#     128, 256 and 512 bits (qemu's sve-max-vq 1, 2, 4; Highway then offers SVE2_128 / SVE_256 besides SVE2, SVE and
#     NEON, and ropekit the best one's FEAT_BF16 twin, e.g. SVE_256_BF16). NEON does not depend on the vector length:
#     it runs at 256 bits only; its twin NEON_BF16 once more on a CPU without SVE (where NEON is the best target).
#   - the unit tier (ctest -L unit) once, at 256 bits, but for the three tests that start threads of their own
#     (qemu-user here never returns from creating a thread: cmake/aarch64-linux-gnu.cmake).
# Emulated times are not performance: nothing here is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --arm64
cmake --preset arm64
cmake --build --preset arm64
export OPENBLAS_NUM_THREADS=1 OMP_THREAD_LIMIT=1
programs=(targets_test append_test attention_test kv_cache_test linear_attention_test paged_kv_cache_test regimes_test)
for vq in 1 2 4; do
  export QEMU_CPU=max,sve-max-vq=$vq
  skip=''
  [ "$vq" = 2 ] || skip='-*/NEON'
  filter="Targets/*$skip"
  targets=$(qemu-aarch64 -L /usr/aarch64-linux-gnu build/arm64/tests/targets_test --gtest_list_tests \
    --gtest_filter="Targets/Rotation.EveryCase*$skip" | sed -n 's|^  EveryCase[A-Za-z]*/\([A-Z0-9_]*\).*|\1|p' |
    paste -sd, -)
  for p in "${programs[@]}"; do
    start=$SECONDS
    log=build/arm64/$p.vq$vq.log
    qemu-aarch64 -L /usr/aarch64-linux-gnu "build/arm64/tests/$p" --gtest_brief=1 --gtest_filter="$filter" >"$log" 2>&1 ||
      { cat "$log"; echo "test-arm64: $p failed with SVE at $((128 * vq)) bits"; exit 1; }
    echo "test-arm64: SVE at $((128 * vq)) bits ($targets): $p, $(grep -o '[0-9]* tests\?\.' "$log") ($((SECONDS - start)) s)"
  done
done
# Without SVE the best target is NEON, whose FEAT_BF16 twin (NEON_BF16: BFCVTN) runs here; with SVE the twin is the
# best SVE target's (SVE2_128_BF16, SVE_256_BF16, SVE2_BF16 above: BFCVT).
export QEMU_CPU=max,sve=off
for p in "${programs[@]}"; do
  start=$SECONDS
  log=build/arm64/$p.nosve.log
  qemu-aarch64 -L /usr/aarch64-linux-gnu "build/arm64/tests/$p" --gtest_brief=1 --gtest_filter='Targets/*NEON_BF16' \
    >"$log" 2>&1 || { cat "$log"; echo "test-arm64: $p failed without SVE"; exit 1; }
  echo "test-arm64: no SVE (NEON_BF16): $p, $(grep -o '[0-9]* tests\?\.' "$log") ($((SECONDS - start)) s)"
done
unset QEMU_CPU
QEMU_CPU=max,sve-max-vq=2 ctest --preset arm64 -L unit \
  -E '^(Table\.RopeGrowsOnDemandAndSharesAcrossThreads|RopeSet\.ConcurrentSequencesAtDifferentLengths|c_api\.program)$'
