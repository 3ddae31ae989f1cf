#!/usr/bin/env bash
# Installs the npm packages a folder of forge's tests pins (DIR/package.json and
# package-lock.json) into DIR/node_modules with `npm ci`. Idempotent: does nothing when
# node_modules matches the lockfile. Usage: bash scripts/setup_npm.sh DIR (relative to the
# repository: web, tests/serve).
set -euo pipefail

rel="${1:?usage: setup_npm.sh DIR}"
die() { echo "setup_npm: error: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/$rel"
STAMP="$DIR/node_modules/.forge-install-stamp"

command -v npm >/dev/null 2>&1 || die "npm not found (scripts/setup.sh installs nodejs and npm)"
[[ -f "$DIR/package.json" && -f "$DIR/package-lock.json" ]] || die "$rel/package.json or package-lock.json missing"
want="$(cat "$DIR/package.json" "$DIR/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "setup_npm: $rel/node_modules up to date"
  exit 0
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1); then
  cat "$log" >&2
  die "npm ci failed in $rel/"
fi
echo "$want" >"$STAMP"
echo "setup_npm: installed $(cd "$DIR" && node -p 'Object.keys(require("./package.json").dependencies).join(", ")') into $rel/node_modules"
