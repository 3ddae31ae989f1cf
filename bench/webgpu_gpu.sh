#!/usr/bin/env bash
# forge's WebGPU backend on a machine with a GPU, through Dawn for Node (npm webgpu) on the
# GPU's Vulkan driver: the adapter, greedy parity with HF's golden tokens, and GPT-2 124M's
# decode and prefill (bench --preset gpt2) in f32 and Q8_0, three runs each. With the peers
# present, in the same run: forge's native Vulkan backend (build-gpu/forge) and HF
# transformers in PyTorch on CUDA (bench/pytorch_cuda_gpt2.py). Run from the repository root
# after scripts/build_wasm.sh, with web/node_modules (scripts/setup_web.sh) present:
#   bash bench/webgpu_gpu.sh [NODE]
# VK_ICD_FILENAMES may name the Vulkan driver.
set -euo pipefail
node="${1:-node}"
run() { "$node" --no-experimental-fetch web/run_wasm.mjs build-wasm/forge.js "$@"; }
echo "== devices"
run devices
echo "== greedy tokens of the golden model on WebGPU (HF's: tests/data/golden/f16_50257/golden.json)"
run generate -m tests/data/golden/f16_50257 --prompt-ids 4970,9086,27733,25892,47407 -n 16 \
  --greedy --ignore-eos --device webgpu --json
for dtype in f32 q8_0; do
  for i in 1 2 3; do
    echo "== webgpu gpt2 $dtype run $i"
    run bench --preset gpt2 --dtype "$dtype" --prompt-tokens 128 --decode-tokens 256 \
      --train-steps 0 --device webgpu --json
  done
done
if [[ -x build-gpu/forge ]]; then
  echo "== peer: forge native, Vulkan, gpt2 f32"
  build-gpu/forge bench --preset gpt2 --prompt-tokens 128 --decode-tokens 256 --train-steps 0 \
    --device vulkan --json
fi
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== peer: HF transformers, PyTorch eager, CUDA fp32"
  python3 bench/pytorch_cuda_gpt2.py --preset gpt2 --prompt-tokens 128 --decode-prompt 128 \
    --decode-tokens 256 --train-steps 1 --train-batch 1 --train-seq 64 --matmul 256
fi
