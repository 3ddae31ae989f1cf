#!/bin/bash
# forge's GPU figures next to the PyTorch CUDA peer, in one call on the GPU machine:
#   bench/gpu_bench.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, /tmp/forge-gpu-bench)
# Each tool's JSON goes to OUT_DIR; a summary is printed:
#   matmul   forge bench --op matmul on the device: 4096^3 and GPT-2 124M's training shapes
#   gpt2     forge bench --preset gpt2 (random init): prefill of 1024 tokens; batch-1 decode
#            of 256 tokens after 128; training steps of 16 x 1024 tokens; each with --profile
#            (GPU time per kernel)
#   pytorch  bench/pytorch_cuda_gpt2.py: HF transformers, CUDA, fp32 (TF32 off), same figures
# PROFILE=0 leaves --profile out (for a backend without device timers).
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/forge-gpu-bench}
F="$BUILD/forge"
# The device: FORGE_DEVICE, else the first one `forge devices --json` lists besides the CPU.
first_device() {
  "$1" devices --json | python3 -c "import json,sys; print(next(d['device'] for d in json.load(sys.stdin)['devices'] if d['device'] != 'cpu'))"
}
DEV=${FORGE_DEVICE:-$(first_device "$F")}
mkdir -p "$OUT"
PROF=--profile
[[ ${PROFILE:-1} == 0 ]] && PROF=
"$F" devices > "$OUT/devices.txt"
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(*[j[k] for k in sys.argv[2:]])" "$@"; }
# The 8 kernels with the most GPU time of a profile (ms per pass).
top() { [[ -n $PROF ]] || return 0; python3 -c "import json,sys; p=json.load(open(sys.argv[1]))[sys.argv[2]]; print('  ', {k: round(v, 3) for k, v in list(p.items())[:8]}, 'sum', round(p['sum of ops'], 3))" "$@"; }
for s in "4096 4096 4096" "16384 2304 768" "16384 768 3072" "16384 3072 768 --trans-b" \
         "768 3072 16384 --trans-a" "16384 50257 768 --trans-b"; do
  set -- $s
  name="matmul_$1x$2x$3${4:-}"
  "$F" bench --op matmul --device "$DEV" --m "$1" --n "$2" --k "$3" ${4:-} --repeat 5 --json \
    > "$OUT/$name.json"
  echo "forge $name: $(field "$OUT/$name.json" ms gflops) (ms, GFLOP/s)"
done
"$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 1024 --decode-tokens 0 --train-steps 0 \
  $PROF --json > "$OUT/prefill.json"
echo "forge prefill 1024: $(field "$OUT/prefill.json" prefill_ms prefill_tok_s) (ms, tok/s)"
top "$OUT/prefill.json" prefill_profile_ms
"$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 128 --decode-tokens 256 --train-steps 0 \
  $PROF --json > "$OUT/decode.json"
echo "forge decode: $(field "$OUT/decode.json" decode_tok_s decode_step_ms_median decode_step_host_ms_median) (tok/s, ms per step, host ms per step)"
top "$OUT/decode.json" decode_step_profile_ms
"$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 1 --decode-tokens 0 --train-batch 16 \
  --train-seq 1024 --train-steps 3 $PROF --json > "$OUT/train.json"
echo "forge train 16x1024: $(field "$OUT/train.json" train_tok_s train_step_ms train_peak_device_mb) (tok/s, ms, peak device MiB)"
top "$OUT/train.json" train_step_profile_ms
python3 "$(dirname "$0")/pytorch_cuda_gpt2.py" > "$OUT/pytorch.json"
echo "pytorch: $(cat "$OUT/pytorch.json" | tr -d '\n ')"
