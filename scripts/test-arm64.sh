#!/usr/bin/env bash
# ropekit on Arm (issue 44), as part of the test command (scripts/test.sh): cross-builds the library and its tests for
# aarch64 (the `arm64` preset: Debian's g++-aarch64-linux-gnu against the arm64 packages that
# `install-deps.sh --arm64` adds through multiarch) and runs them under qemu-aarch64 (user mode):
#   - every SIMD target's tests (gtest Targets/*: the rotation case table bit for bit against the scalar reference,
#     guard regions included, every bf16/fp16 pattern, the angle rows; attention, linear attention, the KV caches and
#     the fused append within their contracts) of every test program that has them, once per SVE vector length:
#     128, 256 and 512 bits (qemu's sve-max-vq 1, 2, 4; Highway then offers SVE2_128 / SVE_256 besides SVE2, SVE and
#     NEON, and ropekit the best one's FEAT_BF16 twin, e.g. SVE_256_BF16). NEON does not depend on the vector length:
#     it runs at 256 bits only; its twin NEON_BF16 once more on a CPU without SVE (where NEON is the best target).
#   - the unit tier (ctest -L unit) once, at 128 bits, but for the three tests that start threads of their own
#     (qemu-user here never returns from creating a thread: cmake/aarch64-linux-gnu.cmake) and the CLI's.
# qemu 7.2 emulates SVE's float32 FMAs 3–4× slower at 256 and 512 bits than at 128 on an AMD host and more on an
# Intel one, where the whole case tables at every length ran past an hour (issue 61). So by default every target runs
# at every length with the attention rows' queries and keys divided by 4 (ROPEKIT_CASE_SHRINK=4: every row, window,
# bias, head mix and dtype kept) and the targets of one length sharing the per-target case tables
# (ROPEKIT_CASE_SAMPLE=4: every case on at least one target of that length; tests/targets.hpp); the CLI and its tests
# are not built. `scripts/test-arm64.sh --full` builds everything and runs every table whole on every target, the
# unit tier at 256 bits with the CLI's tests (about an hour on these 2-core hosts). Emulated times are not
# performance: nothing here is timed but the part itself, whose time per vector length is printed at the end and kept
# in build/arm64/times.txt (scripts/test.sh prints it with its own).
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
[ "${1:-}" = "--full" ] && full=1
./scripts/install-deps.sh --arm64
cmake --preset arm64
# Heaviest first (the jobs below start in this order).
programs=(targets_test regimes_test attention_test append_test kv_cache_test paged_kv_cache_test linear_attention_test
  lab_kernels_test)
if [ $full = 1 ]; then
  cmake --build --preset arm64
else
  # The test programs (the unit tier's and the targets'), not the CLI, its tests or the benchmarks.
  unit_programs=(spec_test plan_test table_test apply_test rope_set_test cos_sin_cache_test cuda_host_test golden_test
    errors_test config_test gguf_test hf_model_test quants_test model_positions_test analysis_test encodings_test
    position_ids_test model_test tokenizer_test sampler_test runner_test lab_test)
  cmake --build --preset arm64 --target "${programs[@]}" "${unit_programs[@]}"
fi
# The cores first: nproc honours OMP_THREAD_LIMIT and OMP_NUM_THREADS, which the guests get below.
cores=$(nproc)
export OPENBLAS_NUM_THREADS=1 OMP_THREAD_LIMIT=1
# One job per program and CPU: (program, label, QEMU_CPU, gtest filter). qemu-user runs one guest thread on one host
# core, so the jobs run side by side, one per core, the heaviest first.
jobs=()
for p in "${programs[@]}"; do
  for vq in 2 4 1; do
    skip=''
    [ "$vq" = 2 ] || skip='-*/NEON'
    jobs+=("$p sve$((128 * vq)) max,sve-max-vq=$vq Targets/*$skip")
  done
  # Without SVE the best target is NEON, whose FEAT_BF16 twin (NEON_BF16: BFCVTN) runs here; with SVE the twin is the
  # best SVE target's (SVE2_128_BF16, SVE_256_BF16, SVE2_BF16: BFCVT).
  jobs+=("$p nosve max,sve=off Targets/*NEON_BF16")
done
if [ $full = 1 ]; then
  export ROPEKIT_CASE_SHRINK=1 ROPEKIT_CASE_SAMPLE=1
else
  export ROPEKIT_CASE_SHRINK=4 ROPEKIT_CASE_SAMPLE=4
fi
run_job() {
  local p=$1 label=$2 cpu=$3 filter=$4 start=$SECONDS log=build/arm64/$1.$2.log
  QEMU_CPU=$cpu qemu-aarch64 -L /usr/aarch64-linux-gnu "build/arm64/tests/$p" \
    --gtest_brief=1 --gtest_filter="$filter" >"$log" 2>&1 || { cat "$log"; echo "test-arm64: $p failed ($label)"; return 1; }
  local targets
  targets=$(sed -n 's/^\([A-Z0-9_]*\): [0-9]* rotation cases.*/\1/p' "$log" | paste -sd, -)
  echo "test-arm64: $label${targets:+ ($targets)}: $p, $(grep -o '[0-9]* tests\?\.' "$log") ($((SECONDS - start)) s)"
  echo "$label $((SECONDS - start))" >>build/arm64/job-times.txt
}
export -f run_job
rm -f build/arm64/job-times.txt
parallel_start=$SECONDS
printf '%s\n' "${jobs[@]}" | xargs -P "$cores" -L 1 bash -c 'run_job "$@"' _
times=()
for label in sve128 sve256 sve512 nosve; do
  seconds=$(awk -v l=$label '$1 == l { s += $2 } END { print s + 0 }' build/arm64/job-times.txt)
  note=' (whole tables)'
  [ $full = 1 ] || note=" (tables shrunk by $ROPEKIT_CASE_SHRINK, shared by the targets)"
  times+=("$(printf '%-7s %5d s of emulation%s' "$label" "$seconds" "$note")")
done
times+=("$(printf 'all     %5d s on %d cores' $((SECONDS - parallel_start)) "$cores")")
unit_start=$SECONDS
# Threads of their own (above); the CLI's tests where it is not built.
exclude='^(Table\.RopeGrowsOnDemandAndSharesAcrossThreads|RopeSet\.ConcurrentSequencesAtDifferentLengths|c_api\.program'
[ $full = 1 ] || exclude+='|cli_binary\..*|Cli.*'
vq=1
[ $full = 1 ] && vq=2
QEMU_CPU=max,sve-max-vq=$vq ctest --preset arm64 -L unit -E "$exclude)\$"
times+=("$(printf 'unit    %5d s at %d bits' $((SECONDS - unit_start)) $((128 * vq)))")
printf '%s\n' "${times[@]}" >build/arm64/times.txt
echo "test-arm64: time per vector length ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')):"
printf '  %s\n' "${times[@]}"
