#!/usr/bin/env bash
# Installs the dependencies, builds (Release) and runs the whole test suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)"
