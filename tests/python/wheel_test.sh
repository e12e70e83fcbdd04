#!/usr/bin/env bash
# Python.wheel: `pip wheel --no-build-isolation --no-deps` of python/ (no downloads; the module
# comes from BUILD_DIR), installed into `python -m venv --system-site-packages` in a temp dir,
# then imported from the venv, trained for a few steps and asked to decode.
# Usage: wheel_test.sh PYTHON SOURCE_DIR BUILD_DIR
set -euo pipefail
python=$1 src=$2 build=$3
# Under the sanitizer build only the import needs the runtimes preloaded (pip, cmake and the
# compiler are not instrumented).
preload=${LD_PRELOAD:-}
unset LD_PRELOAD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/python" "$tmp/src"  # pip builds in the tree it is given: keep the repository clean
SEQTAPE_BUILD_DIR=$build PIP_NO_INDEX=1 "$python" -m pip wheel --no-build-isolation --no-deps \
  -q -w "$tmp/dist" "$tmp/src"
wheel=$(ls "$tmp"/dist/seqtape-*.whl)
echo "built $(basename "$wheel")"
"$python" -m venv --system-site-packages "$tmp/venv"
PIP_NO_INDEX=1 "$tmp/venv/bin/python" -m pip install -q --no-deps "$wheel"
cd "$tmp"
env -u PYTHONPATH LD_PRELOAD="$preload" "$tmp/venv/bin/python" - "$src/datasets/reference/copy.tsv" <<'PY'
import os, sys
import seqtape
assert seqtape.__file__.startswith(sys.prefix), f"imported {seqtape.__file__}, not the venv's"
run = seqtape.train(data=sys.argv[1], preset="seed", steps=3, eval_max=1, no_progress=True,
                    out="run")
[result] = seqtape.Model.load(run).generate(["今天"], max_new=4)
assert set(result) >= {"input", "text", "tokens", "stop_reason"}, result
print("wheel: imported from", os.path.dirname(seqtape.__file__), "and decoded", result["tokens"])
PY
