#!/bin/bash
# The Vulkan tests on a real GPU (the GPU machine of the `device` tool; CI has none):
#   src/backend/vulkan/tools/gpu_tests.sh BUILD_DIR [OUT_DIR] [REPEAT]
# BUILD_DIR holds forge_tests and forge, built elsewhere with -DFORGE_OPENBLAS=OFF and
# carried (the tests find the repository at the path they were built from: link it there).
#   1. the op harness on every Vulkan device (every case against float64 and against the
#      CPU, every matmul tile) and every Vulkan test: harness.txt;
#   2. gemv_chain's cases REPEAT times (default 200) with FORGE_VULKAN_CHAIN=1: the op
#      harness's matmul_add_layernorm_matmul cases and
#      Vulkan.MatmulAddLayernormMatmulOfOneRowIsOneDispatch, whose tally lines (second-phase
#      workgroups that consumed the first phase's rows / recomputed them) are summed: chain.txt.
# Prints the counts of tests run and failed; exits non-zero if any failed.
set -uo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/forge-gpu-tests}
REPEAT=${3:-200}
T="$BUILD/forge_tests"
mkdir -p "$OUT"
"$BUILD/forge" devices > "$OUT/devices.txt" 2>&1

summary() {  # file label: gtest's per-run totals, summed over repeats
  awk -v label="$2" '
    /^\[  PASSED  \] [0-9]+ test/ { p += $4 }
    /^\[  FAILED  \] [0-9]+ test/ { f += $4 }
    /^\[  SKIPPED \] [0-9]+ test/ { s += $4 }
    END { printf "%s: %d passed, %d failed, %d skipped\n", label, p, f, s }' "$1"
  grep '^\[  FAILED  \] [A-Za-z]' "$1" | sort -u | head -20
}

"$T" --gtest_filter='*/vulkan_*:Vulkan*:Attention.*' > "$OUT/harness.txt" 2>&1
rc1=$?
summary "$OUT/harness.txt" "op harness + Vulkan tests"

chain='AllOps/OpReference.*/vulkan_*matmul_add_layernorm_*'
chain+=':AllOps/OpParity.*/vulkan_*matmul_add_layernorm_*'
chain+=':Vulkan.MatmulAddLayernormMatmulOfOneRowIsOneDispatch'
chain+=":Vulkan.SixteenBitSeamOfOneRowIsOneDispatch"
FORGE_VULKAN_CHAIN=1 "$T" --gtest_filter="$chain" --gtest_repeat="$REPEAT" > "$OUT/chain.txt" 2>&1
rc2=$?
summary "$OUT/chain.txt" "gemv_chain cases x $REPEAT"
awk '/^gemv_chain tally:/ { c += $4; r += $6; n++ }
     END { printf "gemv_chain tally over %d runs: %d consumed, %d recomputed\n", n, c, r }' \
  "$OUT/chain.txt"
[[ $rc1 -eq 0 && $rc2 -eq 0 ]]
