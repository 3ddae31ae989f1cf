#!/bin/bash
# Sweeps the Vulkan kernels' switches on a GPU, to set their automatic choices:
#   src/backend/vulkan/tools/sweep.sh [BUILD_DIR]    (default: build)
#   1. GPT-2 prefill's four weight products (1024 rows) under every big tile and split of k
#      (FORGE_VULKAN_MATMUL_TILE x FORGE_VULKAN_SPLIT_K), then auto: ms, GFLOP/s;
#   2. prefill of 1024 tokens with each attention tile (FORGE_VULKAN_ATTENTION_TILE) and with
#      the old 128x128 tile everywhere;
#   3. decode steps (128 + 256 tokens) with forced attention splits
#      (FORGE_VULKAN_ATTENTION_SPLITS) and with the decode graph off (FORGE_DECODE_GRAPH=0).
set -euo pipefail
F="${1:-build}/forge"
DEV=${FORGE_DEVICE:-vulkan}
ms() { python3 -c "import json,sys; j=json.load(sys.stdin); print(*[round(j[k], 4) if isinstance(j[k], float) else j[k] for k in sys.argv[1:]])" "$@"; }
for s in "1024 2304 768 --bias" "1024 768 768 --bias --accumulate" "1024 3072 768 --bias --gelu" \
         "1024 768 3072 --bias --accumulate"; do
  set -- $s; m=$1 n=$2 k=$3; shift 3
  for tile in 128x128 64x128 128x64 auto; do
    for split in 1 2 3 4 auto; do
      [[ $tile == auto && $split != auto ]] && continue
      r=$(FORGE_VULKAN_MATMUL_TILE=$tile FORGE_VULKAN_SPLIT_K=$split "$F" bench --op matmul \
          --device "$DEV" --m $m --n $n --k $k "$@" --repeat 30 --json | ms ms gflops)
      echo "matmul ${m}x${n}x${k} $* tile=$tile split=$split: $r"
    done
  done
done
P="bench --preset gpt2 --device $DEV --train-steps 0"
for at in small big; do
  for tile in auto 128x128; do
    r=$(FORGE_VULKAN_ATTENTION_TILE=$at FORGE_VULKAN_MATMUL_TILE=$tile "$F" $P --prompt-tokens 1024 \
        --decode-tokens 0 --json | ms prefill_ms prefill_tok_s)
    echo "prefill 1024 attention=$at matmul=$tile: $r (ms, tok/s)"
  done
done
for splits in auto 1 2 4 8 12; do
  r=$(FORGE_VULKAN_ATTENTION_SPLITS=$splits "$F" $P --prompt-tokens 128 --decode-tokens 256 \
      --json | ms decode_tok_s decode_step_ms_median decode_step_host_ms_median)
  echo "decode splits=$splits: $r (tok/s, ms per step, host ms)"
done
r=$(FORGE_DECODE_GRAPH=0 "$F" $P --prompt-tokens 128 --decode-tokens 256 --json |
    ms decode_tok_s decode_step_ms_median decode_step_host_ms_median)
echo "decode graph off: $r (tok/s, ms per step, host ms)"
"$F" $P --prompt-tokens 1024 --decode-tokens 0 --profile | tail -12
"$F" $P --prompt-tokens 128 --decode-tokens 256 --profile | tail -10
