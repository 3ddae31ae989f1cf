#!/bin/bash
# The CUDA tests on a real GPU (the GPU machine of the `device` tool; CI has none):
#   src/backend/cuda/tools/gpu_tests.sh BUILD_DIR [OUT_DIR]
# BUILD_DIR holds forge_tests and forge, built elsewhere with -DFORGE_OPENBLAS=OFF and
# carried (the tests find the repository at the path they were built from: link it there).
# Runs the op harness on every CUDA device (every case against float64 and against the CPU,
# the exact ops bit for bit), the end-to-end model tests, and every Cuda* test: tests.txt.
# Prints the counts of tests run and failed; exits non-zero if any failed.
set -uo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/forge-cuda-tests}
mkdir -p "$OUT"
"$BUILD/forge" devices > "$OUT/devices.txt" 2>&1
"$BUILD/forge_tests" --gtest_filter='*/cuda_*:Cuda*' > "$OUT/tests.txt" 2>&1
rc=$?
awk '/^\[  PASSED  \] [0-9]+ test/ { p += $4 }
     /^\[  FAILED  \] [0-9]+ test/ { f += $4 }
     /^\[  SKIPPED \] [0-9]+ test/ { s += $4 }
     END { printf "cuda tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$OUT/tests.txt"
grep '^\[  FAILED  \] [A-Za-z]' "$OUT/tests.txt" | sort -u | head -40
exit $rc
