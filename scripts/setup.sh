#!/usr/bin/env bash
# Installs seqtape's build and test dependencies from Debian packages. Idempotent: runs
# `apt-get update` once, then installs only what is missing. Needs root (or sudo).
set -euo pipefail
. "$(dirname "$0")/args.sh"
script_args 0 "$@"

packages=(
  build-essential cmake pkg-config
  libopenblas-dev   # BLAS through CBLAS (sgemm/dgemm/sgemv)
  libgtest-dev      # tests
  libbenchmark-dev  # bench/
  libcereal-dev     # checkpoints
  libcli11-dev      # command line
  nlohmann-json3-dev # JSON config, export and traces
  libxxhash-dev     # checkpoint checksums
  libsentencepiece-dev # subword vocabularies (seqtape vocab)
  libcpp-httplib-dev # seqtape serve (HTTP server)
  libopenmpi-dev openmpi-bin # data-parallel training (mpirun -np N seqtape train)
  libdnnl-dev       # oneDNN: --matmul onednn|auto, --precision bf16
  trans-de-en       # the German-English dictionary behind datasets/de-en
  festlex-cmu       # the CMU pronouncing dictionary behind datasets/cmudict
  chromium chromium-driver  # the browser test of web/player.html (headless, Debian's build)
  nodejs            # drives the browser test (web/test/player_test.mjs; built-in fetch, no npm)
  fonts-wqy-microhei # CJK glyphs in the page's screenshots
  pybind11-dev python3-dev python3-numpy # the Python module (import seqtape)
  python3-pytest python3-setuptools python3-wheel python3-venv python3-pip # its tests and the offline wheel
  python3-prometheus-client # parses serve's /metrics in the server's tests
  python3-torch     # the PyTorch reference trainer in bench/ and the formula tests against it
)
# npm installs the pinned official `openai` client for the server's test. A nodejs that ships its
# own npm (NodeSource's) conflicts with Debian's npm package: ask for it only where npm is missing.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi
if [ "${SEQTAPE_WITH_EXTRAS:-0}" = 1 ]; then
  packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
