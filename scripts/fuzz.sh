#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, coverage on every library)
# into build-fuzz/ and runs each for a fixed budget. Exits non-zero on any finding: a crash, a
# sanitizer report, an unexpected exception, a broken round trip, a timeout (> 10 s on one
# input), an allocation over 256 MB or an RSS over 2 GB.
#
#   FUZZ_SECONDS=30       seconds per target (default 30)
#   FUZZ_TARGETS="..."    subset of: checkpoint safetensors vocab subword tsv config cli request
#
# New corpus entries go to a temporary directory (the committed seeds stay as they are); a
# finding is saved as build-fuzz/findings/<target>-crash-* and, once understood, belongs in
# fuzz/regressions/<target>/ (replayed by tests/faults and at the start of every fuzz run).
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 0 "$@"
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
targets=${FUZZ_TARGETS:-"checkpoint safetensors vocab subword tsv config cli request"}

SEQTAPE_WITH_EXTRAS=1 ./scripts/setup.sh  # clang and libclang-rt-14-dev (libFuzzer)

mkdir -p build-fuzz
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSEQTAPE_BUILD_FUZZ=ON -DSEQTAPE_BUILD_TESTS=OFF -DSEQTAPE_BUILD_BENCH=OFF >/dev/null
build_targets=()
for t in $targets; do build_targets+=(--target "fuzz_$t"); done
if ! cmake --build build-fuzz -j2 "${build_targets[@]}" >build-fuzz/build.log 2>&1; then
  grep -E 'error' -A5 build-fuzz/build.log | head -60 >&2
  echo "fuzz: build failed: see build-fuzz/build.log" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p build-fuzz/findings
failed=0
for t in $targets; do
  case $t in
    checkpoint) max_len=32768 dict= ;;
    safetensors) max_len=8192 dict=fuzz/dict/json.dict ;;
    config) max_len=4096 dict=fuzz/dict/json.dict ;;
    vocab | tsv) max_len=4096 dict=fuzz/dict/text.dict ;;
    subword) max_len=16384 dict= ;;
    # Whole commands in-process: their own output is closed (-close_fd_mask=3).
    cli) max_len=512 dict=fuzz/dict/cli.dict ;;
    request) max_len=4096 dict=fuzz/dict/http.dict ;;
    *) echo "fuzz: unknown target '$t'" >&2; exit 2 ;;
  esac
  mkdir -p "$work/$t"
  # Absolute paths: fuzz_cli runs its commands from a directory of its own.
  seeds=("$PWD"/fuzz/corpus/"$t")
  [ -d fuzz/regressions/"$t" ] && seeds+=("$PWD"/fuzz/regressions/"$t")
  log=build-fuzz/fuzz_$t.log
  rc=0
  build-fuzz/fuzz/fuzz_"$t" "$work/$t" "${seeds[@]}" ${dict:+-dict=$PWD/$dict} \
    -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$PWD"/build-fuzz/findings/"$t"- \
    $([ "$t" = cli ] && echo -close_fd_mask=3) \
    >"$log" 2>&1 || rc=$?
  # The last status line ("#N ... cov: C ft: F corp: ...") and the final stats (grep -a: a
  # target may print raw input bytes into its log, which grep would call a binary file).
  status=$(grep -aE '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$status")
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="FINDING (exit $rc): $(grep -a -m1 -E 'ERROR|what\(\)|runtime error' "$log" || true); see $log"
    failed=1
  fi
  printf 'fuzz_%-12s %10s execs in %ss  cov: %-5s ft: %-6s corpus %-12s %s\n' \
    "$t" "${execs:-?}" "$seconds" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: findings in build-fuzz/findings/" >&2
  exit 1
fi
echo "fuzz: no findings"
