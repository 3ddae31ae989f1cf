#!/usr/bin/env bash
# forge's main job, from a fresh clone: set up, build, fetch GPT-2's tokenizer files and the
# State of the Union corpus, train a small GPT-2 on it on the CPU, then generate text with
# the trained model. Usage: bash scripts/demo.sh
#
# The model is the "mini" preset (4 layers, 4 heads, 256 wide, context 256, GPT-2's 50257
# BPE tokens: 16M parameters), trained for FORGE_DEMO_STEPS optimizer steps (default 300) of
# 8 sequences x 128 tokens. On an idle 2-core machine that takes about 3-5 minutes (plus
# ~20 s to tokenize the corpus once; longer when other work shares the cores); the
# validation loss falls from ~10.8 (uniform over 50257 tokens) to ~6.4, enough for the
# samples to be made of the corpus's words and phrases. Ctrl-C stops it with a checkpoint;
# running the script again resumes where it stopped.
#
# Output: out/demo-<steps>/ (an HF GPT-2 folder + training state, metrics.jsonl, loss.svg).
# Environment: FORGE_NUM_THREADS (threads, default: all cores), FORGE_JOBS (compile jobs),
# FORGE_BUILD_DIR (default: build), FORGE_DEMO_STEPS (default 300).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

bash scripts/setup.sh
build="${FORGE_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFORGE_WERROR=ON
cmake --build "$build" -j "${FORGE_JOBS:-$(nproc)}" --target forge

forge="$build/forge"
"$forge" --version
echo
"$forge" devices
echo

bash scripts/fetch_tokenizer.sh
bash scripts/fetch_corpus.sh
echo

steps="${FORGE_DEMO_STEPS:-300}"
out="out/demo-$steps"
resume=()
if [[ -f "$out/train_state.safetensors" ]]; then
  echo "demo: $out holds an earlier run: resuming it"
  resume=(--resume)
fi
"$forge" train --data data/sotu --out "$out" "${resume[@]}" \
  --preset mini --batch 8 --seq 128 --steps "$steps" --warmup 30 --lr 1e-3 \
  --eval-every 50 --eval-batches 8 --sample-every 150 --sample-tokens 48 --save-every 100

echo
echo "demo: loss curve in $out/loss.svg, per-step figures in $out/metrics.jsonl"
prompt="The state of the Union"
echo "demo: $forge generate -m $out -p '$prompt' -n 64 --seed 1"
printf '%s' "$prompt"
"$forge" generate -m "$out" -p "$prompt" -n 64 --seed 1
