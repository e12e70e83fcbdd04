#!/usr/bin/env bash
# The main job: installs the dependencies, builds (Release), checks every gradient, trains the
# reference model (the "seed" preset) on 今天天气很好 and decodes it back.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
bin=./build/cli/seqtape
out=${SEQTAPE_DEMO_OUT:-runs/demo}

echo
echo "== 1. gradient checks: every op and three whole models, float64 vs central differences =="
$bin gradcheck --quiet

echo
echo "== 2. train the reference model (d_model 4, 1 head, 2+2 layers, FFN 16, post-norm, PE base 100) on 今天天气很好 =="
rm -rf "$out"
$bin train --data datasets/reference/copy.tsv --vocab datasets/reference/vocab.txt \
  --preset seed --steps 300 --lr 0.02 --log-every 25 --no-progress --out "$out"
echo "(loss curve: $out/loss.svg, every logged step: $out/metrics.csv)"
