#!/usr/bin/env bash
# The runs behind docs/lab.md's "claims, band by band" (issue 38 item 4) on stories15M (L0 = 256, 24 pairs):
# the table of every method with each one's plan pair by pair, YaRN's ramp swept over beta_fast x beta_slow,
# and YaRN's temperature swept over sqrt(1/t) = 1.0 ... 1.5; then bench/lab/claims.py prints the tables.
#   bench/lab/claims.sh [OUT_DIR]        (MODELS: the folder of stories15M.bin, default ../shared/models)
# About 6 minutes on 2 Zen 4 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/claims}
models=${MODELS:-../shared/models}
threads=${THREADS:-2}
ropekit=build/release/tools/ropekit
mkdir -p "$out"
"$ropekit" tokenize --tokenizer "$models/tok32000-legacy.bin" --stories --text data/tinystories-valid-excerpt.txt \
  --out "$out/excerpt.i32" >/dev/null
common=(--model "$models/stories15M.bin" --tokens "$out/excerpt.i32" --threads "$threads")
yarn='"rope_type":"yarn","factor":"s","original_max_position_embeddings":256'

# Every method, and what each does to every pair at each N.
"$ropekit" eval "${common[@]}" --methods orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,dyn_ntk_stale,llama3,swa,restart,rerope,rerope_logn,self_extend,dca,logn \
  --csv "$out/table.csv" --plans "$out/plans.csv" --svg "$out/table.svg" >"$out/table.txt"

# YaRN's ramp: the pairs with more than beta_fast turns over L0 are kept, fewer than beta_slow interpolated.
methods=orig,restart
for bf in 8 16 32 64; do
  for bs in 1 2; do methods+=",yarn_bf${bf}_bs${bs}={${yarn},\"beta_fast\":${bf},\"beta_slow\":${bs}}"; done
done
"$ropekit" eval "${common[@]}" --lengths 512 1024 2048 --methods "$methods" --csv "$out/beta.csv" \
  --plans "$out/beta-plans.csv" >"$out/beta.txt"

# YaRN's temperature: the magnitude on cos and sin (attention_factor), HF's default being 0.1 ln s + 1.
methods=orig,restart
for a in 1.0 1.1 1.2 1.3 1.4 1.5; do methods+=",yarn_t${a}={${yarn},\"attention_factor\":${a}}"; done
"$ropekit" eval "${common[@]}" --lengths 512 1024 2048 --methods "$methods" --csv "$out/temperature.csv" \
  >"$out/temperature.txt"

python3 bench/lab/claims.py "$out/table.csv" "$out/plans.csv" "$out/beta.csv" "$out/temperature.csv" \
  >"$out/claims.md"
echo "wrote $out/claims.md"
