#!/usr/bin/env bash
# The copy-task acceptance run (issue: default preset >= 99% exact match on held-out strings):
# generates 10,000 training and 500 held-out strings, trains the default preset, and prints the
# validation loss, greedy exact match, steps and wall time. Needs a build (scripts/build.sh).
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 1 "$@"
cd "$(dirname "$0")/.."
out=${1:-runs/copy}
bin=./build/cli/seqtape
$bin gen-copy --out "$out/data" --train 10000 --valid 500 --seed 1
SECONDS=0
$bin train --data "$out/data/train.tsv" --valid "$out/data/valid.tsv" --vocab "$out/data/vocab.txt" \
  --preset default --steps "${STEPS:-1500}" --batch 64 --lr 1e-3 --warmup 200 --eval-every 500 \
  --log-every 250 --no-progress --out "$out/model" ${THREADS:+--threads "$THREADS"}
echo "wall time: ${SECONDS} s (generation, training and evaluation)"
