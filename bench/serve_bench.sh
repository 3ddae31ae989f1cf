#!/usr/bin/env bash
# forge serve's throughput with 1 slot and with 4: `forge serve --parallel S` under S
# streaming clients (bench/serve_load.mjs) for SECONDS each, greedy completions of
# MAX_TOKENS tokens (EOS ignored). Prints each run's JSON line (aggregate tok/s, p50/p99 time
# to first token) and the ratio of aggregate tok/s, 4 slots over 1.
#   bench/serve_bench.sh [MODEL] [SECONDS] [MAX_TOKENS] [THREADS]
# MODEL: a model folder with tokenizer files; default: a random-init GPT-2 124M made here
# (one training step of `forge train`, which writes the folder and GPT-2's tokenizer).
# The peer, in the same run: llama.cpp (tools/llamacpp, scripts/setup_llamacpp.sh) decoding 1
# and 4 sequences of the same model at once in one context (its server's slots), on the
# model written as an f32 GGUF file, with THREADS and with 1 thread (its best here).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
forge="${FORGE_BUILD_DIR:-$repo/build}/forge"
model="${1:-}"
seconds="${2:-30}"
max_tokens="${3:-64}"
threads="${4:-$(nproc)}"
tmp="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
if [[ -z "$model" ]]; then
  model="$tmp/gpt2"
  "$forge" train --data "$repo/data/sotu" --preset gpt2 --steps 1 -b 1 --seq 32 --eval-batches 1 \
    --sample-every 0 --out "$model" > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
fi
declare -A tok_s
for slots in 1 4; do
  port=$((20000 + RANDOM % 20000))
  "$forge" --threads "$threads" serve -m "$model" --port "$port" --parallel "$slots" 2> "$tmp/serve.log" &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.1
  done
  line="$(node "$repo/bench/serve_load.mjs" "http://127.0.0.1:$port" "$slots" "$seconds" "$max_tokens")"
  echo "slots $slots: $line"
  tok_s[$slots]="$(node -p "JSON.parse(process.argv[1]).tok_s" "$line")"
  kill -TERM "$pid"
  wait "$pid" || true
done
node -p "'forge serve, aggregate tok/s, 4 slots / 1 slot: ' + (${tok_s[4]} / ${tok_s[1]}).toFixed(2) + 'x'"
if [[ -d "$repo/tools/llamacpp/node_modules" ]]; then
  "$forge" quantize -m "$model" -o "$tmp/model.gguf" --type f32 > /dev/null
  for t in "$threads" 1; do
    declare -A peer
    for s in 1 4; do
      line="$(node "$repo/tools/llamacpp/run.mjs" parallel --model "$tmp/model.gguf" --sequences "$s" \
        --prefill 8 --decode "$max_tokens" --threads "$t" 2> /dev/null)"
      echo "llama.cpp, $t thread(s), $s sequence(s): $line"
      peer[$s]="$(node -p "JSON.parse(process.argv[1]).median_tok_s" "$line")"
    done
    node -p "'llama.cpp ($t thread(s)), aggregate tok/s, 4 sequences / 1: ' + (${peer[4]} / ${peer[1]}).toFixed(2) + 'x'"
  done
fi
