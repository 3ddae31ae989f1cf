#!/usr/bin/env bash
# Builds forge's browser module and serves the page on 127.0.0.1 (Ctrl-C stops it):
#   bash scripts/web.sh [-m MODEL] [--port 8080] [--host 127.0.0.1]
# MODEL is an HF GPT-2 folder (config.json, model.safetensors, tokenizer files) or a .gguf
# file; the page loads it on opening and caches it in the browser (OPFS). Without -m, pick a
# model on the page. Open the printed address in Chrome or Edge (WebGPU; other browsers get
# the wasm CPU backend). FORGE_WEB_NO_BUILD=1 serves what build-wasm/ holds.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "error: $*" >&2; exit 1; }
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m|--model|--port|--host)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (usage: bash scripts/web.sh [-m MODEL] [--port N] [--host H])" ;;
  esac
done
command -v node >/dev/null 2>&1 || die "node not found (bash scripts/setup.sh installs it)"
if [[ "${FORGE_WEB_NO_BUILD:-0}" != 1 ]]; then
  bash "$repo/scripts/build_wasm.sh"
fi
exec node "$repo/web/serve.mjs" "${args[@]}"
