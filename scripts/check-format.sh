#!/usr/bin/env bash
# Fails (exit 1, naming the files) when a tracked C/C++ file differs from what clang-format writes with
# the repository's .clang-format (Google style, 120 columns), or when a source file includes a header
# by a parent-relative path ("../"), which would step around the include roots the build gives each
# layer (CMakeLists.txt: ropekit_layer). `--fix` rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.h' '*.c' '*.cu')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
status=0
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: not formatted (scripts/check-format.sh --fix rewrites them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  status=1
fi
if relative=$(grep -n '#include "\.\./' "${files[@]}"); then
  echo "check-format: parent-relative includes step around the layers' include roots:" >&2
  echo "$relative" >&2
  status=1
fi
exit $status
