#!/bin/sh
# forge vs PyTorch on GPT-2 inference, same shapes and settings, one after the other.
#
#   bench/compare_gpt2.sh [PRESET] [PROMPT_TOKENS] [DECODE_TOKENS] [THREADS] [BATCH]
#   (defaults: gpt2 128 64 2 1; FORGE_BUILD_DIR picks the build, default build/)
#
# Prints forge's JSON, PyTorch's JSON, then the forge / PyTorch ratios. Needs Debian's
# PyTorch at /usr/bin/python3 (python3-torch) and python3 for the arithmetic.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
preset=${1:-gpt2}
prompt=${2:-128}
decode=${3:-64}
threads=${4:-2}
batch=${5:-1}
forge=${FORGE_BUILD_DIR:-$root/build}/forge
[ -x "$forge" ] || { echo "error: $forge not found (build first, or set FORGE_BUILD_DIR)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$forge" bench --preset "$preset" --prompt-tokens "$prompt" --decode-tokens "$decode" \
  --batch "$batch" --threads "$threads" --json > "$tmp/forge.json"
/usr/bin/python3 "$here/pytorch_gpt2.py" --preset "$preset" --prompt-tokens "$prompt" \
  --decode-tokens "$decode" --batch "$batch" --threads "$threads" > "$tmp/torch.json"

echo "== forge"; cat "$tmp/forge.json"
echo "== pytorch"; cat "$tmp/torch.json"
/usr/bin/python3 - "$tmp/forge.json" "$tmp/torch.json" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
def ratio(key):
    a, b = f.get(key), t.get(key)
    return a / b if a and b else None
print("== forge / pytorch")
print(json.dumps({"prefill_tok_s": ratio("prefill_tok_s"),
                  "decode_tok_s": ratio("decode_tok_s"),
                  "forge_peak_over_weights_plus_kv": f.get("peak_over_weights_plus_kv")},
                 indent=2))
PY
