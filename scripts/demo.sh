#!/usr/bin/env bash
# The main job on its built-in default: installs dependencies, builds the release preset and runs
# the ropekit CLI on the Llama-3.1-8B preset: its RoPE plan pair by pair (frequency, wavelength,
# turns within the original context, Llama 3 band), then the same plan as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ropekit_tool
./build/release/tools/ropekit inspect --preset llama-3.1-8b
./build/release/tools/ropekit freqs --preset llama-3.1-8b --json
