#!/usr/bin/env bash
# The HTML reference (docs/reference/Doxyfile): the public C++ headers with their contracts (precision, error,
# valid range), the C API, the Python package and the guides, into build/reference/html — open index.html.
# Doxygen from Debian (scripts/install-deps.sh). Prints the warnings it finds to build/reference/warnings.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/reference}
mkdir -p "$out"
version=$(sed -n 's/^project(ropekit VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
(cat docs/reference/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "PROJECT_NUMBER = $version"
 echo "WARN_LOGFILE = $out/warnings.txt") | doxygen -
echo "reference: $out/html/index.html ($(grep -c . "$out/warnings.txt" || true) warnings in $out/warnings.txt)"
