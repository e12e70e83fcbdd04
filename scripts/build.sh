#!/usr/bin/env bash
# Configures and builds seqtape (Release) into build/. Used by demo.sh and test.sh.
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 0 "$@"
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
if ! cmake --build build -j"$jobs" >build/build.log 2>&1; then
  grep -E 'error|Error' -A5 build/build.log | head -60 >&2
  echo "build failed: see build/build.log" >&2
  exit 1
fi
if grep -q 'warning:' build/build.log; then
  # Release builds are kept warning-free: show any that crept in.
  echo "build: compiler warnings (see build/build.log):" >&2
  grep 'warning:' build/build.log | sort -u | head -20 >&2
fi
echo "build: ok (Release, build/)"
