#!/usr/bin/env bash
# Installs llama.cpp for forge's GGUF interop tests and benchmark: the npm package node-llama-cpp
# (pinned in tools/llamacpp/package.json and package-lock.json) with its prebuilt Linux x64 CPU
# binaries, into tools/llamacpp/node_modules. Idempotent: does nothing when node_modules already
# matches the lockfile. Prints one status line.
#
# Only the npm registry is used. node-llama-cpp's postinstall (which would test the binary and, if
# that failed, fall back to downloading and compiling llama.cpp) is skipped with --ignore-scripts
# and NODE_LLAMA_CPP_SKIP_DOWNLOAD; tools/llamacpp/run.mjs asks for build:"never", gpu:false and
# skipDownload, so nothing is ever built or fetched at run time either. Optional dependencies
# (GPU builds and other platforms' binaries, ~650 MB) are omitted; the CPU binaries come from
# @node-llama-cpp/linux-x64, a direct dependency.
set -euo pipefail

die() { echo "setup_llamacpp: error: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/tools/llamacpp"
STAMP="$DIR/node_modules/.forge-install-stamp"
ADDON="$DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node"

command -v node >/dev/null 2>&1 || die "node not found (scripts/setup.sh installs nodejs and npm)"
command -v npm >/dev/null 2>&1 || die "npm not found (scripts/setup.sh installs nodejs and npm)"
[[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]] || die "only Linux x86_64 has the pinned prebuilt binaries"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
((node_major >= 20)) || die "node >= 20 needed, found $(node --version)"
[[ -f "$DIR/package.json" && -f "$DIR/package-lock.json" ]] || die "$DIR/package.json or package-lock.json missing"

want="$(cat "$DIR/package.json" "$DIR/package-lock.json" | sha256sum | cut -d' ' -f1)"
version() { node -p 'require(process.argv[1]).version' "$DIR/node_modules/node-llama-cpp/package.json"; }

if [[ -f "$STAMP" && -f "$ADDON" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "setup_llamacpp: node-llama-cpp $(version) already installed in tools/llamacpp/node_modules"
  exit 0
fi

start=$SECONDS
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! (cd "$DIR" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_POSTINSTALL=skip \
      npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error >"$log" 2>&1); then
  cat "$log" >&2
  die "npm ci failed in tools/llamacpp"
fi
[[ -f "$ADDON" ]] || die "npm ci finished but $ADDON is missing"
# Load the prebuilt binary once, so that a broken install fails here and not in a test.
if ! info="$(cd "$ROOT" && node tools/llamacpp/run.mjs info 2>&1)"; then
  echo "$info" >&2
  die "the prebuilt llama.cpp does not load"
fi
echo "$want" >"$STAMP"
echo "setup_llamacpp: installed node-llama-cpp $(version) (prebuilt llama.cpp, CPU) in tools/llamacpp/node_modules in $((SECONDS - start))s, $(du -sh "$DIR/node_modules" | cut -f1)"
