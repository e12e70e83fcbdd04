#!/usr/bin/env bash
# seqtape against the PyTorch reference trainer (bench/torch_reference.py) at equal wall time:
# the same model, initial weights, vocabulary, data and recipe, trained for the same --time-limit
# on the same threads, one after the other, then both decoded and scored by `seqtape eval` with
# the same beam. Prints one JSON line per trainer and a greedy agreement check (the PyTorch
# forward pass against seqtape's decoder on the PyTorch weights).
#
# usage: bench/vs_torch.sh SEQTAPE DATA_DIR OUT_DIR TIME [model flags...]
#   SEQTAPE   the seqtape binary (build/cli/seqtape)
#   DATA_DIR  holds train.tsv, valid.tsv, test.tsv (e.g. datasets/cmudict/make.sh's output)
#   TIME      the wall-time budget of each trainer: 90s, 10m, 30m
#   model flags: the seqtape train model options, e.g. --d-model 256 --heads 4 --enc-layers 3
#             --dec-layers 3 --ffn 1024 --dropout 0.1 --tgt-tokenizer words
# The recipe (env, both trainers): LR 1e-3, WARMUP 400, SCHEDULE wsd, DECAY_FRACTION 0.2,
# BATCH_TOKENS 2048, LABEL_SMOOTHING 0.1, THREADS 2, PRECISION f32 (or bf16: seqtape's bf16
# products, PyTorch's autocast), BEAM 5, CHECK 50 (sources decoded by both for the agreement).
# Run it on an otherwise idle machine: the two trainers must see the same CPU.
set -euo pipefail
# Not script_args: the model flags after TIME are seqtape's own options.
. "$(dirname "$0")/../scripts/args.sh"
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then script_usage; exit 0; fi
if [ $# -lt 4 ]; then script_usage >&2; exit 2; fi
seqtape=$1 data=$2 out=$3 budget=$4
shift 4
py=/usr/bin/python3  # Debian's python3, the one python3-torch installs into
here=$(cd "$(dirname "$0")" && pwd)
LR=${LR:-1e-3} WARMUP=${WARMUP:-400} SCHEDULE=${SCHEDULE:-wsd} DECAY_FRACTION=${DECAY_FRACTION:-0.2}
BATCH_TOKENS=${BATCH_TOKENS:-2048}
LABEL_SMOOTHING=${LABEL_SMOOTHING:-0.1} THREADS=${THREADS:-2} PRECISION=${PRECISION:-f32}
BEAM=${BEAM:-5} CHECK=${CHECK:-50}
for f in train valid test; do
  [ -f "$data/$f.tsv" ] || { echo "vs_torch.sh: $data/$f.tsv is missing" >&2; exit 3; }
done
"$py" -c 'import torch' 2>/dev/null || { echo "vs_torch.sh: needs python3-torch" >&2; exit 2; }
mkdir -p "$out"
recipe=(--lr "$LR" --warmup "$WARMUP" --schedule "$SCHEDULE" --decay-fraction "$DECAY_FRACTION"
  --batch-tokens "$BATCH_TOKENS"
  --label-smoothing "$LABEL_SMOOTHING" --threads "$THREADS" --precision "$PRECISION")

# The initial model both trainers start from: one step at a rate too small to move a weight.
"$seqtape" train --data "$data/train.tsv" --valid "$data/valid.tsv" "$@" --steps 1 --lr 1e-30 \
  --schedule constant --out "$out/init" --overwrite --no-progress >/dev/null
"$seqtape" export --model "$out/init" --out "$out/init_export" >/dev/null

"$seqtape" train --data "$data/train.tsv" --valid "$data/valid.tsv" "$@" "${recipe[@]}" \
  --time-limit "$budget" --out "$out/seqtape" --overwrite --no-progress >"$out/seqtape.log" 2>&1
"$py" "$here/torch_reference.py" --init "$out/init_export" --data "$data/train.tsv" \
  --out "$out/torch" --time-limit "$budget" "${recipe[@]}" --check "$CHECK" \
  --check-data "$data/test.tsv" >"$out/torch.out" 2>"$out/torch.log"

for who in seqtape torch; do
  "$seqtape" eval --model "$out/$who" --data "$data/test.tsv" --beam "$BEAM" --json \
    >"$out/$who.eval.json"
done
steps_s=$(grep -o 'trained steps 1\.\.[0-9]*' "$out/seqtape.log" | grep -o '[0-9]*$' || echo '?')
tps_s=$(grep -o '([0-9.]* tokens/s)' "$out/seqtape.log" | tail -1 | tr -d '()' | cut -d' ' -f1 || true)
echo "{\"trainer\": \"seqtape\", \"steps\": \"$steps_s\", \"tokens_per_second\": \"$tps_s\"," \
  "\"eval\": $(cat "$out/seqtape.eval.json")}"
echo "{\"trainer\": \"torch\", \"train\": $(head -1 "$out/torch.out"), \"eval\": $(cat "$out/torch.eval.json")}"

# Agreement: PyTorch's own greedy outputs against seqtape decoding the PyTorch weights.
tail -n +2 "$out/torch.out" >"$out/torch_greedy.tsv"
cut -f1 "$out/torch_greedy.tsv" >"$out/check_sources.txt"
"$seqtape" generate --model "$out/torch" --input-file "$out/check_sources.txt" --json \
  --batch-size 32 | "$py" -c '
import json, sys
ours = [json.loads(l)["text"] for l in sys.stdin if l.strip()]
theirs = [l.rstrip("\n").split("\t", 1)[1] for l in open(sys.argv[1], encoding="utf-8")]
same = sum(a == b for a, b in zip(ours, theirs))
print(json.dumps({"greedy_agreement": f"{same}/{len(theirs)}"}))
sys.exit(0 if same == len(theirs) else 1)' "$out/torch_greedy.tsv"
