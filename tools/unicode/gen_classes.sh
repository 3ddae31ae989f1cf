#!/usr/bin/env bash
# Regenerates src/text/unicode_classes.inc from this machine's PCRE2 (libpcre2-dev), the
# engine of the native pre-tokenizer. Run it after PCRE2's Unicode version changes; the test
# PretokenizerScan.ClassesMatchPcre2EveryCodePoint says when.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
g++ -std=c++20 -O2 -I "$root/src" -o "$tmp/gen" "$root/tools/unicode/gen_classes.cpp" -lpcre2-8
"$tmp/gen" >"$root/src/text/unicode_classes.inc"
echo "wrote src/text/unicode_classes.inc"
