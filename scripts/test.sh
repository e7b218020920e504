#!/usr/bin/env bash
# The whole test suite: installs dependencies, then configures, builds and runs ctest for the
# release preset and for the dev preset (Debug + AddressSanitizer + UndefinedBehaviorSanitizer).
# Golden vectors are read from ../shared/golden/hf.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --workflow --preset release
cmake --workflow --preset dev
