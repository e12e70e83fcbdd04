#!/usr/bin/env bash
# Builds the whole test suite with AddressSanitizer + UndefinedBehaviorSanitizer (g++,
# -DSEQTAPE_SANITIZE=ON, -O1 -g1, no benchmarks) into build-asan/ and runs it under ctest.
# -O1 is the level AddressSanitizer's documentation suggests, and -g1 keeps the line tables, so
# reports still name file and line. On the 2-core AVX2 machine this built in 800 s instead of
# the 1,505 s of -O2 -g (RelWithDebInfo's default), and the suite ran 176 s instead of 127 s.
# Zero reports allowed: UBSan and ASan stop the process at the first report, leaks are checked
# at exit, and every report (also from `seqtape` processes that tests spawn) is written to
# build-asan/sanitizer-reports/, which must stay empty. The Python module's pytest suite runs there
# too (ctest's Python.pytest), with the sanitizer runtimes in LD_PRELOAD and leak checking off for
# the python process (tests/python/CMakeLists.txt).
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 0 "$@"
cd "$(dirname "$0")/.."
./scripts/setup.sh

jobs=2
cmake -S . -B build-asan -DSEQTAPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DSEQTAPE_BUILD_BENCH=OFF -DSEQTAPE_BUILD_TESTS=ON >/dev/null
if ! cmake --build build-asan -j"$jobs" >build-asan/build.log 2>&1; then
  grep -E 'error|Error' -A5 build-asan/build.log | head -60 >&2
  echo "sanitize: build failed: see build-asan/build.log" >&2
  exit 1
fi
if grep -q 'warning:' build-asan/build.log; then
  echo "sanitize: compiler warnings (see build-asan/build.log):" >&2
  grep 'warning:' build-asan/build.log | sort -u | head -20 >&2
fi

reports=$PWD/build-asan/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
status=0
ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 || status=$?
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize: sanitizer reports:" >&2
  for f in "$reports"/*; do
    echo "==== $f" >&2
    head -40 "$f" >&2
  done
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize: FAILED" >&2
  exit "$status"
fi
echo "sanitize: all tests pass under ASan + UBSan with zero reports"
