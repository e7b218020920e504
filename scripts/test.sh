#!/usr/bin/env bash
# The whole test suite: installs dependencies, then configures, builds and runs ctest for the
# release preset, the dev preset (Debug + AddressSanitizer + UndefinedBehaviorSanitizer) and the
# fuzz preset (clang libFuzzer targets for the three parsers, 20 s each with ASan + UBSan).
# Every test reads the repository's own data (tests/data/, models/, data/): a clone alone passes.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --workflow --preset release
cmake --workflow --preset dev
cmake --workflow --preset fuzz
