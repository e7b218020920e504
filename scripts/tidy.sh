#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks) on every C++ source of src/ and tools/ with the release build's
# compile_commands.json, and fails when it finds anything the recorded baseline (.clang-tidy-baseline:
# one "file:check" per line, counted) does not hold — the baseline may only shrink. `--record` rewrites
# the baseline from this run. The per-target SIMD files (src/cpu/*.cpp: Highway compiles each once per
# target) are left out: clang-tidy spends minutes on each, and their kernels are checked bit for bit
# against the scalar reference on every target instead.
#   scripts/tidy.sh [--record]       (after `cmake --preset release`)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
[ -f "$build/compile_commands.json" ] || cmake --preset release >/dev/null
mapfile -t files < <(git ls-files 'src/*.cpp' 'tools/*.cpp' | grep -v '^src/cpu/')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The generated presets source and the build's headers must exist for the files to compile.
cmake --build "$build" --target ropekit_config >/dev/null
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet 2>/dev/null |
  grep -E '^/.*: warning: .*\[[a-z-]+\]$' | sed -E "s|^$PWD/||; s|^([^:]+):[0-9]+:[0-9]+: warning: .*\[([a-z-]+)\]$|\1:\2|" |
  sort | uniq -c | awk '{print $2, $1}' > "$out" || true
if [ "${1:-}" = "--record" ]; then
  cp "$out" .clang-tidy-baseline
  echo "tidy.sh: recorded $(wc -l < .clang-tidy-baseline) file:check entries in .clang-tidy-baseline"
  exit 0
fi
status=0
while read -r key count; do
  allowed=$(awk -v k="$key" '$1 == k {print $2}' .clang-tidy-baseline 2>/dev/null)
  if [ -z "$allowed" ] || [ "$count" -gt "$allowed" ]; then
    echo "tidy.sh: $key: $count finding(s), the baseline allows ${allowed:-0}" >&2
    status=1
  fi
done < "$out"
if [ $status -eq 0 ]; then
  echo "tidy.sh: $(awk '{s += $2} END {print s + 0}' "$out") finding(s), none beyond the baseline ($(awk '{s += $2} END {print s + 0}' .clang-tidy-baseline) recorded)"
else
  echo "tidy.sh: fix them (clang-tidy -p $build FILE shows each), or, for one that is right as it is, say why in a NOLINT comment" >&2
fi
exit $status
