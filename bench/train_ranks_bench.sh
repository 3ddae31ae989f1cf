#!/bin/sh
# Data-parallel training on the CPU: `forge train` as 1 process x 2 threads against
# `mpirun -np 2` x 1 thread, same global batch, alternating, ROUNDS rounds each; and the
# peer in the same rounds: PyTorch (Debian's, bench/pytorch_train_gpt2.py) as 1 process x 2
# threads and as DistributedDataParallel over Gloo, 2 processes x 1 thread.
#
#   bench/train_ranks_bench.sh [PRESET] [BATCH] [SEQ] [STEPS] [ROUNDS]
#   (defaults: mini 8 128 12 3; the SOTU corpus of scripts/fetch_corpus.sh, GPT-2's BPE)
#
# Prints each run's median step tok/s (forge: steps 3.. of metrics.jsonl, the first two warm
# the allocator; PyTorch: the median of its timed steps after a warm-up) and the medians over
# rounds. FORGE_BUILD_DIR picks the build.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
preset=${1:-mini}
batch=${2:-8}
seq=${3:-128}
steps=${4:-12}
rounds=${5:-3}
forge=${FORGE_BUILD_DIR:-$root/build}/forge
[ -x "$forge" ] || { echo "error: $forge not found (build first, or set FORGE_BUILD_DIR)" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "error: mpirun not found (scripts/setup.sh installs openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args="train --data $root/data/sotu --preset $preset --batch $batch --seq $seq
      --eval-every 0 --sample-every 0 --save-every 0 --dropout 0.1"
# Tokenize once, outside the timed runs (each run copies the cache).
"$forge" $args --out "$tmp/cache" --steps 1 --threads 2 > /dev/null 2>&1

median_tok_s() {  # metrics.jsonl -> the median tok/s of steps 3..
  /usr/bin/python3 -c '
import json, statistics, sys
v = [json.loads(l)["tok_s"] for l in open(sys.argv[1])][2:]
print(round(statistics.median(v)))' "$1"
}

: > "$tmp/one" ; : > "$tmp/two" ; : > "$tmp/t_one" ; : > "$tmp/t_two"
torch_tok_s() {  # ranks threads -> PyTorch's tok/s
  /usr/bin/python3 "$here/pytorch_train_gpt2.py" --preset "$preset" --batch "$batch" --seq "$seq" \
    --steps 6 --threads "$2" --ranks "$1" |
    /usr/bin/python3 -c 'import json, sys; print(round(json.load(sys.stdin)["train_tok_s"]))'
}
r=1
while [ "$r" -le "$rounds" ]; do
  rm -rf "$tmp/run"; mkdir "$tmp/run"; cp "$tmp/cache"/tokens.* "$tmp/run/"
  "$forge" $args --steps "$steps" --out "$tmp/run" --threads 2 > /dev/null 2>&1
  median_tok_s "$tmp/run/metrics.jsonl" >> "$tmp/one"
  rm -rf "$tmp/run"; mkdir "$tmp/run"; cp "$tmp/cache"/tokens.* "$tmp/run/"
  mpirun -np 2 --bind-to none --mca btl_vader_single_copy_mechanism none \
    "$forge" $args --steps "$steps" --out "$tmp/run" --threads 1 > /dev/null 2>&1
  median_tok_s "$tmp/run/metrics.jsonl" >> "$tmp/two"
  torch_tok_s 1 2 >> "$tmp/t_one"
  torch_tok_s 2 1 >> "$tmp/t_two"
  echo "round $r: forge 1 rank x 2 threads $(tail -1 "$tmp/one") tok/s, 2 ranks x 1 thread $(tail -1 "$tmp/two") tok/s;" \
    "PyTorch 1 x 2 $(tail -1 "$tmp/t_one"), DDP 2 x 1 $(tail -1 "$tmp/t_two")"
  r=$((r + 1))
done
/usr/bin/python3 - "$tmp/one" "$tmp/two" "$tmp/t_one" "$tmp/t_two" <<'PY'
import statistics, sys
m = [statistics.median(float(x) for x in open(f)) for f in sys.argv[1:5]]
print(f"median: forge 1 rank x 2 threads {m[0]:.0f} tok/s, 2 ranks x 1 thread {m[1]:.0f} tok/s,"
      f" ratio {m[1] / m[0]:.2f}")
print(f"median: PyTorch 1 x 2 threads {m[2]:.0f} tok/s, DDP 2 x 1 thread {m[3]:.0f} tok/s,"
      f" ratio {m[3] / m[2]:.2f}")
print(f"forge / PyTorch: 1 process {m[0] / m[2]:.2f}x, 2 ranks {m[1] / m[3]:.2f}x")
PY
