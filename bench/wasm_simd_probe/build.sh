#!/usr/bin/env bash
# Builds probe.wasm (and its text, probe.wat) with Debian's emscripten.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"
out="${1:-.}"
emcc -O3 -msimd128 --no-entry -sSTANDALONE_WASM probe.c -o "$out/probe.wasm"
wasm-dis "$out/probe.wasm" > "$out/probe.wat"
