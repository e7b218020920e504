#!/usr/bin/env bash
# The main job on its built-in default: installs dependencies, builds the release preset, prints the
# RoPE plan of the Llama-3.1-8B preset, then runs the long-context lab on the bundled TinyStories Llama
# (trained at 512 tokens): 2 windows of the bundled text at lengths 512 and 2048 with four methods —
# orig (the model's RoPE), pi, yarn, swa — as a table of perplexity by target position on stdout and a
# chart in build/lab.svg. The full table (every method, N up to 4096) is docs/lab.md's command.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ropekit_tool
rk=./build/release/tools/ropekit
"$rk" inspect --preset llama-3.1-8b
"$rk" tokenize --tokenizer models/tok512.bin --text data/tinystories-valid-excerpt.txt --stories \
  --out build/tinystories-excerpt.i32
"$rk" eval --model models/tinystories-260k.bin --tokens build/tinystories-excerpt.i32 --windows 2 \
  --lengths 512,2048 --buckets 0,256,512,1024,2048 --methods orig,pi,yarn,swa --svg build/lab.svg
echo "chart: build/lab.svg"
