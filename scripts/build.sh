#!/usr/bin/env bash
# Configures and builds seqtape (Release) into build/. Used by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" 2>&1 | grep -vE '^\[ *[0-9]+%\]|^(gmake|make)\[' || true
test -x build/cli/seqtape || { echo "build failed" >&2; exit 1; }
