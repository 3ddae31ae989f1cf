#!/usr/bin/env bash
# Installs the npm packages of forge's browser tests (pinned in web/package.json and
# package-lock.json) into web/node_modules: npm webgpu (Dawn for Node), which runs the WGSL
# kernels under node on the Vulkan driver VK_ICD_FILENAMES names (in CI: Chromium's
# SwiftShader). Idempotent: does nothing when node_modules matches the lockfile.
set -euo pipefail

die() { echo "setup_web: error: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/web"
STAMP="$DIR/node_modules/.forge-install-stamp"

command -v npm >/dev/null 2>&1 || die "npm not found (scripts/setup.sh installs nodejs and npm)"
[[ -f "$DIR/package.json" && -f "$DIR/package-lock.json" ]] || die "web/package.json or package-lock.json missing"
want="$(cat "$DIR/package.json" "$DIR/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "setup_web: web/node_modules up to date"
  exit 0
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1); then
  cat "$log" >&2
  die "npm ci failed in web/"
fi
echo "$want" >"$STAMP"
echo "setup_web: installed $(cd "$DIR" && node -p 'Object.keys(require("./package.json").dependencies).join(", ")') into web/node_modules"
