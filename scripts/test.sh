#!/usr/bin/env bash
# The whole test suite: installs the dependencies, then
#   1. the test suite again under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh),
#   2. every libFuzzer target for a short fixed budget (scripts/fuzz.sh, FUZZ_SECONDS, default 30),
#   3. the Release build and its test suite under ctest (last, so ctest's summary ends the output),
#      with the Python module's pytest suite (tests/python), whose summary line is printed after.
# SEQTAPE_QUICK=1 skips steps 1 and 2 (for a quick local check; CI runs everything).
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 0 "$@"
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ "${SEQTAPE_QUICK:-0}" != 1 ]; then
  echo "== sanitizers: the test suite under ASan + UBSan =="
  ./scripts/sanitize.sh
  echo "== fuzzing: each target for ${FUZZ_SECONDS:-30} s =="
  ./scripts/fuzz.sh
fi
echo "== Release build and the test suite =="
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)"
# The Python module's pytest suite ran as the ctest entry Python.pytest; its summary line:
grep -E '^(=+ )?[0-9]+ (passed|failed|error).* in [0-9.]+s' build/Testing/Temporary/LastTest.log |
  sed 's/^/pytest (Python.pytest): /' || echo "pytest: not run (the Python module is off: see cmake's 'Python module:' line)"
