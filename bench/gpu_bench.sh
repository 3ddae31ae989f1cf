#!/bin/bash
# forge's Vulkan figures next to the PyTorch CUDA peer, in one call on the GPU machine:
#   bench/gpu_bench.sh [BUILD_DIR]       (default build; the binary must have FORGE_VULKAN)
# 1. matmul 4096^3 on the device; 2. GPT-2 124M prefill of 1024 tokens; 3. batch-1 decode
# of 256 tokens after a 128-token prompt (2 and 3 with GPU time per kernel); 4. training
# steps of 16 x 1024 tokens; 5. bench/pytorch_cuda_gpt2.py (HF transformers, fp32, TF32 off)
# for the same figures. Prints each tool's JSON, labelled.
set -euo pipefail
BUILD=${1:-build}
F="$BUILD/forge"
DEV=${FORGE_DEVICE:-vulkan}
echo "== forge devices"; "$F" devices
echo "== forge matmul 4096^3"
"$F" bench --op matmul --device "$DEV" --m 4096 --n 4096 --k 4096 --repeat 10 --json || true
echo "== forge prefill 1024"
"$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 1024 --decode-tokens 0 --train-steps 0 \
  --profile --json
echo "== forge decode 256 after 128 (profiled)"
"$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 128 --decode-tokens 256 --train-steps 0 \
  --profile --json
echo "== forge train 16 x 1024"
"$F" bench --preset gpt2 --device "$DEV" --prompt-tokens 1 --decode-tokens 0 --train-batch 16 \
  --train-seq 1024 --train-steps 3 --json
echo "== pytorch (HF transformers, CUDA fp32)"
python3 "$(dirname "$0")/pytorch_cuda_gpt2.py"
