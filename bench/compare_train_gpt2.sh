#!/bin/sh
# forge vs PyTorch on GPT-2 training steps, same shapes and settings, one after the other.
#
#   bench/compare_train_gpt2.sh [PRESET] [BATCH] [SEQ] [THREADS] [STEPS]
#   (defaults: gpt2 4 64 2 3 — llm.c's CPU setting; FORGE_BUILD_DIR picks the build)
#
# Prints forge's JSON, PyTorch's JSON, then forge / PyTorch. Needs Debian's PyTorch at
# /usr/bin/python3 (python3-torch).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
preset=${1:-gpt2}
batch=${2:-4}
seq=${3:-64}
threads=${4:-2}
steps=${5:-3}
forge=${FORGE_BUILD_DIR:-$root/build}/forge
[ -x "$forge" ] || { echo "error: $forge not found (build first, or set FORGE_BUILD_DIR)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$forge" bench --preset "$preset" --prompt-tokens 1 --decode-tokens 0 --train-batch "$batch" \
  --train-seq "$seq" --train-steps "$steps" --threads "$threads" --json > "$tmp/forge.json"
/usr/bin/python3 "$here/pytorch_train_gpt2.py" --preset "$preset" --batch "$batch" --seq "$seq" \
  --steps "$steps" --threads "$threads" > "$tmp/torch.json"

echo "== forge"; cat "$tmp/forge.json"
echo "== pytorch"; cat "$tmp/torch.json"
/usr/bin/python3 - "$tmp/forge.json" "$tmp/torch.json" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
print("== forge / pytorch")
print(json.dumps({"train_tok_s": f["train_tok_s"] / t["train_tok_s"],
                  "forge_train_peak_rss_mb": f["train_peak_rss_mb"],
                  "pytorch_peak_rss_mb": t["peak_rss_mb"]}, indent=2))
PY
