#!/usr/bin/env bash
# Data-parallel training throughput (issue 13), measured in one run on this machine:
#   1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread (mpirun), and 2 ranks without
#   overlap (--no-overlap: every bucket starts after backward),
# on the small and medium presets, with the copy task. Prints tokens/s, the speed-up over one
# rank with one thread, and the allreduce figures seqtape train prints: the time a step waits
# for the gradient sum (the communication that backward did not hide) and its share of the step.
# First, bench_allreduce times the allreduce alone at bucket sizes up to the medium gradient.
#
#   bash bench/bench_mpi.sh [build-dir]      (default: build)
#
# Each run trains for a fixed number of steps; its tokens/s counts label tokens over the
# training loop only (the final evaluation is excluded). The machine is shared: compare the
# rows of one run with each other, not with another run's.
set -euo pipefail
. "$(dirname "$0")/../scripts/args.sh"
script_args 1 "$@"
BUILD=${1:-build}
SEQTAPE=$(realpath "$BUILD/cli/seqtape")
WORK=$(mktemp -d /tmp/seqtape_bench_mpi.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

"$SEQTAPE" gen-copy --out "$WORK/data" --train 20000 --valid 50 --min-len 10 --max-len 16 \
  --seed 3 >/dev/null

# run NAME PRESET STEPS BATCH LAUNCHER... -- FLAGS...: prints one table row
run() {
  local name=$1 preset=$2 steps=$3 batch=$4
  shift 4
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  local out="$WORK/run_${preset}_${name// /_}"
  local log
  log=$("${launcher[@]}" "$SEQTAPE" train --data "$WORK/data/train.tsv" --valid "$WORK/data/valid.tsv" \
    --preset "$preset" --steps "$steps" --batch "$batch" --eval-max 0 --save-every 0 \
    --no-progress --log-every 1000000 --out "$out" "$@" 2>&1) || { echo "$log" >&2; exit 1; }
  local tps wait share
  tps=$(echo "$log" | sed -n 's/^trained steps .* (\([0-9]*\) tokens\/s).*/\1/p')
  wait=$(echo "$log" | sed -n 's/.*; \([0-9.]*\) ms per step waiting for it (\([0-9.]*\)% of the step).*/\1/p')
  share=$(echo "$log" | sed -n 's/.*ms per step waiting for it (\([0-9.]*\)% of the step).*/\1/p')
  local mb
  mb=$(echo "$log" | sed -n 's/^allreduce over [0-9]* ranks: \([0-9.]*\) MB.*/\1/p')
  echo "$preset|$name|$tps|${mb:--}|${wait:--}|${share:--}"
}

echo "seqtape data-parallel bench: $(nproc) cores, $("${MPIRUN[@]}" --version | head -1)"
echo
"${MPIRUN[@]}" -np 2 "$BUILD/bench/bench_allreduce"
rows=()
for spec in "small 300 64" "medium 40 32"; do
  read -r preset steps batch <<<"$spec"
  rows+=("$(run "1 rank x 1 thread" "$preset" "$steps" "$batch" -- --threads 1)")
  rows+=("$(run "1 rank x 2 threads" "$preset" "$steps" "$batch" -- --threads 2)")
  rows+=("$(run "2 ranks x 1 thread" "$preset" "$steps" "$batch" "${MPIRUN[@]}" -np 2 -- --threads 1)")
  rows+=("$(run "2 ranks x 1 thread, no overlap" "$preset" "$steps" "$batch" "${MPIRUN[@]}" -np 2 -- \
    --threads 1 --no-overlap)")
done

printf "\n%-7s %-31s %11s %8s %10s %13s %9s\n" preset run tokens/s "vs 1x1" "grad MB" \
  "wait ms/step" "of step"
base=""
for r in "${rows[@]}"; do
  IFS='|' read -r preset name tps mb wait share <<<"$r"
  [ "$name" = "1 rank x 1 thread" ] && base=$tps
  printf "%-7s %-31s %11s %7.2fx %10s %13s %8s%%\n" "$preset" "$name" "$tps" \
    "$(echo "$tps / $base" | bc -l)" "$mb" "$wait" "$share"
done
echo
echo "wait ms/step: time a step spends in the gradient allreduce after backward (communication"
echo "not hidden behind backward); without overlap it is the whole allreduce."
