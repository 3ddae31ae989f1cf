#!/usr/bin/env bash
# Builds forge for wasm with Debian's emscripten (the CMake preset "wasm", into build-wasm/):
#   build-wasm/forge.js + forge.wasm   the CLI under node: node web/run_wasm.mjs build-wasm/forge.js ...
#   build-wasm/forge_web_op_tests.js   the op harness on the WebGPU backend, under node:
#                                      node web/run_wasm.mjs build-wasm/forge_web_op_tests.js
#   build-wasm/forge_web.js + .wasm    the page's engine (web/page/worker.js loads it)
# and the page's threads build (the preset "wasm-threads", into build-wasm-mt/):
#   build-wasm-mt/forge_web_mt.js + .wasm + .worker.js   the engine on the CPU of a
#                                      cross-origin isolated page, its pool on Web Workers
# Usage: bash scripts/build_wasm.sh   (scripts/setup.sh installs emscripten)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
command -v emcc >/dev/null 2>&1 || { echo "build_wasm: error: emcc not found (bash scripts/setup.sh installs emscripten)" >&2; exit 1; }
# Debian's emscripten runs its JavaScript tools with node and finds their modules here.
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"
cmake --preset wasm >/dev/null
cmake --build --preset wasm -j "${FORGE_JOBS:-$(nproc)}" --target forge forge_web forge_web_op_tests
cmake --preset wasm-threads >/dev/null
cmake --build --preset wasm-threads -j "${FORGE_JOBS:-$(nproc)}" --target forge_web
