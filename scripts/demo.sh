#!/usr/bin/env bash
# Sets up, builds and runs forge's main job: the device list and the matmul benchmark on
# GPT-2 124M shapes, side by side with OpenBLAS. Usage: bash scripts/demo.sh
#
# Environment: FORGE_NUM_THREADS (threads, default: all cores), FORGE_JOBS (compile jobs),
# FORGE_BUILD_DIR (default: build).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

bash scripts/setup.sh
build="${FORGE_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFORGE_WERROR=ON
cmake --build "$build" -j "${FORGE_JOBS:-$(nproc)}" --target forge

forge="$build/forge"
"$forge" --version
echo
"$forge" devices
# m k n, flags: a square GEMM; the fused q|k|v projection of a 64-token prefill
# ([64, 768] @ [768, 2304]); one decode step of the tied LM head ([1, 768] @ wte^T, wte
# being [50257, 768]: a GEMV that reads 154 MB).
while read -r m k n flags; do
  echo
  "$forge" bench --op matmul --m "$m" --k "$k" --n "$n" $flags
done <<'SHAPES'
1024 1024 1024
64 768 2304
1 768 50257 --trans-b
SHAPES
