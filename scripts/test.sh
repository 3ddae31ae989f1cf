#!/usr/bin/env bash
# Sets up, builds and runs forge's whole test suite, twice:
#   1. build/       Release, -Werror                         (ctest)
#   2. build-asan/  AddressSanitizer + UBSan, -Werror        (ctest again)
# Exits non-zero on the first failure: a compiler warning, a failing test, or any sanitizer
# report (leaks included). Usage: bash scripts/test.sh   (from anywhere; root or sudo for apt)
#
# Environment: FORGE_JOBS (parallel compile jobs, default: all cores), FORGE_SKIP_ASAN=1 to
# run only the Release pass (a quicker local check; CI runs both), FORGE_BUILD_DIR and
# FORGE_ASAN_BUILD_DIR to build elsewhere than build/ and build-asan/.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
jobs="${FORGE_JOBS:-$(nproc)}"
build="${FORGE_BUILD_DIR:-build}"
build_asan="${FORGE_ASAN_BUILD_DIR:-build-asan}"

step() { printf '\n=== %s\n' "$*"; }
start=$SECONDS

step "setup: system packages"
bash scripts/setup.sh

# Test data that is fetched rather than committed (verified by checksum inside the script).
if [[ -f scripts/fetch_tokenizer.sh ]]; then
  step "setup: tokenizer files"
  bash scripts/fetch_tokenizer.sh
fi

# setup.sh has just installed python3-torch, so a test whose PyTorch reference is missing
# must fail here, not skip (tests/pyref.h reads CI).
export CI=true

step "release build ($build/)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFORGE_WERROR=ON -DFORGE_SANITIZE=OFF
cmake --build "$build" -j "$jobs"
step "release tests"
ctest --test-dir "$build" --output-on-failure -j2

if [[ "${FORGE_SKIP_ASAN:-0}" != 1 ]]; then
  # -O2 -g: fast enough for the numeric tests, precise enough for readable stack traces.
  step "sanitizer build ($build_asan/: ASan + UBSan)"
  cmake -S . -B "$build_asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFORGE_WERROR=ON \
    -DFORGE_SANITIZE=ON -DFORGE_BENCH=OFF
  cmake --build "$build_asan" -j "$jobs"
  step "sanitizer tests"
  # Any report stops the process with a non-zero status, so ctest counts it as a failure.
  # scripts/lsan.supp: what the Vulkan loader and driver (lavapipe) keep until exit.
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:print_stacktrace=1:abort_on_error=0:detect_stack_use_after_return=1" \
  LSAN_OPTIONS="suppressions=$repo/scripts/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --test-dir "$build_asan" --output-on-failure -j2
fi

step "all tests passed ($((SECONDS - start)) s)"
