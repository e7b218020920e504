#!/usr/bin/env bash
# The main job on its built-in default: installs dependencies, builds the release preset and
# prints Llama-3.1-8B's RoPE plan, then rotates a query/key pair with it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target rope_demo
./build/release/examples/rope_demo
