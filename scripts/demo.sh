#!/usr/bin/env bash
# The main job: installs the dependencies, builds (Release), checks every gradient, trains the
# reference model (the "seed" preset) on 今天天气很好 and decodes it back.
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 0 "$@"
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

echo
echo "== 3. decode it back with the inference module (infer/, no tape): KV cache vs recomputing the prefix =="
echo "-- with the KV cache (and every step's logits compared with a from-scratch recompute):"
$bin generate --model "$out/checkpoint.bin" --input 今天天气很好 --verify-cache
echo "-- without the cache:"
$bin generate --model "$out/checkpoint.bin" --input 今天天气很好 --no-cache
echo "-- beam search, 3 best:"
$bin generate --model "$out/checkpoint.bin" --input 今天天气很好 --beam 3 --n-best 3
echo "(7 tokens are too few for the cache to pay off; ./build/bench/bench_decode measures 16 to 512 tokens)"
