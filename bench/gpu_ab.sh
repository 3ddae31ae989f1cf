#!/bin/bash
# Two builds of forge side by side on one GPU, alternating, for "must not regress" checks:
#   bench/gpu_ab.sh OLD_BUILD NEW_BUILD [ROUNDS] [OUT_DIR]   (defaults: 3, /tmp/forge-gpu-ab)
# Each round runs, for the old build and then the new one, gpu_bench.sh's forge figures
# (without --profile and without the PyTorch peer): the matmul shapes, a prefill of 1024
# tokens, a batch-1 decode of 256 tokens after 128, and training steps of 16 x 1024 tokens.
# Prints each figure's median over the rounds for both builds and new / old (for times,
# old / new: above 1 is faster either way).
set -euo pipefail
OLD=$1
NEW=$2
ROUNDS=${3:-3}
OUT=${4:-/tmp/forge-gpu-ab}
# The device: FORGE_DEVICE, else the first one `forge devices --json` lists besides the CPU.
first_device() {
  "$1" devices --json | python3 -c "import json,sys; print(next(d['device'] for d in json.load(sys.stdin)['devices'] if d['device'] != 'cpu'))"
}
DEV=${FORGE_DEVICE:-$(first_device "$NEW/forge")}
mkdir -p "$OUT"
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j[sys.argv[2]])" "$@"; }

run_build() {  # label build round: one line "figure value" per figure into OUT/label.txt
  local label=$1 F="$2/forge" r=$3 f
  for s in "4096 4096 4096" "16384 2304 768" "16384 768 3072" "16384 3072 768 --trans-b" \
           "768 3072 16384 --trans-a" "16384 50257 768 --trans-b"; do
    set -- $s
    f="$OUT/$label.$r.matmul_$1x$2x$3${4:-}.json"
    "$F" bench --op matmul --device "$DEV" --m "$1" --n "$2" --k "$3" ${4:-} --repeat 5 --json > "$f"
    echo "matmul_$1x$2x$3${4:-}_gflops $(field "$f" gflops)" >> "$OUT/$label.txt"
  done
  f="$OUT/$label.$r.prefill.json"
  "$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 1024 --decode-tokens 0 \
    --train-steps 0 --json > "$f"
  echo "prefill_tok_s $(field "$f" prefill_tok_s)" >> "$OUT/$label.txt"
  f="$OUT/$label.$r.decode.json"
  "$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 128 --decode-tokens 256 \
    --train-steps 0 --json > "$f"
  echo "decode_tok_s $(field "$f" decode_tok_s)" >> "$OUT/$label.txt"
  f="$OUT/$label.$r.train.json"
  "$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 1 --decode-tokens 0 \
    --train-batch 16 --train-seq 1024 --train-steps 3 --json > "$f"
  echo "train_tok_s $(field "$f" train_tok_s)" >> "$OUT/$label.txt"
}

rm -f "$OUT/old.txt" "$OUT/new.txt"
for r in $(seq 1 "$ROUNDS"); do
  run_build old "$OLD" "$r"
  run_build new "$NEW" "$r"
done
python3 - "$OUT/old.txt" "$OUT/new.txt" <<'EOF'
import statistics, sys
def load(p):
    d = {}
    for line in open(p):
        k, v = line.split()
        d.setdefault(k, []).append(float(v))
    return d
old, new = load(sys.argv[1]), load(sys.argv[2])
print(f"{'figure':36} {'old (median)':>14} {'new (median)':>14} {'new/old':>8}   runs")
for k in old:
    o, n = statistics.median(old[k]), statistics.median(new[k])
    print(f"{k:36} {o:14.1f} {n:14.1f} {n / o:8.3f}   old {old[k]} new {new[k]}")
EOF
