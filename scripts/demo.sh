#!/usr/bin/env bash
# Installs the dependencies, builds (Release) and runs the demo: the gradient-check report.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
echo
echo "== seqtape gradcheck: every op's float64 Jacobian vs central differences =="
./build/cli/seqtape gradcheck
