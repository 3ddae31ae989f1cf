#!/bin/sh
# forge vs llama.cpp (npm node-llama-cpp, scripts/setup_llamacpp.sh) on the same GGUF files:
# GPT-2 124M shapes with random weights, in f32, f16, q8_0 and q4_0; a prefill of PROMPT
# tokens and a batch-1 greedy decode of DECODE, ROUNDS alternations of the two engines.
#
#   bench/compare_llamacpp.sh [ROUNDS] [PROMPT] [DECODE]      (defaults: 3 128 64)
#   FORGE_BUILD_DIR picks forge's build (default build/); FORGE_THREADS forge's threads (2).
#
# The files: tools/llamacpp/make_test_gguf.py writes an f32 GPT-2 with GPT-2's init scale (an
# independent writer, the real GPT-2 tokenizer), and `forge quantize` turns it into the four
# files both engines read.
# llama.cpp runs with 1 and 2 threads; its better figure is the peer (its thread pool waits on
# this VM: docs/PERFORMANCE.md). The machine's read bandwidth (bench/read_bandwidth.c, 1 GiB,
# forge's thread count) is measured in the same run, for the bandwidth share of each decode:
# weight bytes per token (forge bench's weights_mb) x tok/s / read bandwidth.
# Prints one line per dtype and a JSON summary (medians over the rounds) at the end.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rounds=${1:-3}
prompt=${2:-128}
decode=${3:-64}
threads=${FORGE_THREADS:-2}
forge=${FORGE_BUILD_DIR:-$root/build}/forge
[ -x "$forge" ] || { echo "error: $forge not found (build first, or set FORGE_BUILD_DIR)" >&2; exit 1; }
[ -d "$root/tools/llamacpp/node_modules/node-llama-cpp" ] || bash "$root/scripts/setup_llamacpp.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -mavx2 -pthread "$here/read_bandwidth.c" -o "$tmp/read_bw"
# --gain 0.554: weights of std 0.02 (GPT-2's init) = 0.554 / sqrt(768), as in forge bench --preset.
/usr/bin/python3 "$root/tools/llamacpp/make_test_gguf.py" --preset gpt2 --dtype f32 --gain 0.554 \
  --out "$tmp/base.gguf" > /dev/null
for t in f32 f16 q8_0 q4_0; do
  "$forge" quantize -m "$tmp/base.gguf" -o "$tmp/$t.gguf" --type "$t" > /dev/null
done

for r in $(seq 1 "$rounds"); do
  "$tmp/read_bw" "$threads" > "$tmp/bw_$r.json"
  for t in f32 f16 q8_0 q4_0; do
    "$forge" bench --model "$tmp/$t.gguf" --prompt-tokens "$prompt" --decode-tokens "$decode" \
      --train-steps 0 --threads "$threads" --json > "$tmp/forge_${t}_$r.json"
    for lt in 1 2; do
      node "$root/tools/llamacpp/run.mjs" bench --model "$tmp/$t.gguf" --prefill "$prompt" \
        --decode "$decode" --threads "$lt" --reps 3 > "$tmp/llama_${t}_${lt}_$r.json"
    done
  done
done

/usr/bin/python3 - "$tmp" "$rounds" "$threads" <<'PY'
import json, os, statistics, sys
tmp, rounds, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
load = lambda p: json.load(open(os.path.join(tmp, p)))
bw = statistics.median(load(f"bw_{r}.json")["gb_s"] for r in range(1, rounds + 1))
out = {"threads": threads, "read_gb_s": bw, "dtypes": {}}
for t in ["f32", "f16", "q8_0", "q4_0"]:
    f = [load(f"forge_{t}_{r}.json") for r in range(1, rounds + 1)]
    fp = statistics.median(x["prefill_tok_s"] for x in f)
    fd = statistics.median(x["decode_tok_s"] for x in f)
    mb = f[0]["weights_mb"]
    best = {}
    for lt in (1, 2):
        l = [load(f"llama_{t}_{lt}_{r}.json") for r in range(1, rounds + 1)]
        best[lt] = (statistics.median(x["median_prefill"] for x in l),
                    statistics.median(x["median_decode"] for x in l))
    lp_t = max(best, key=lambda k: best[k][0]); ld_t = max(best, key=lambda k: best[k][1])
    lp, ld = best[lp_t][0], best[ld_t][1]
    share = mb * 1048576 * fd / (bw * 1e9)
    out["dtypes"][t] = {"forge_prefill": fp, "forge_decode": fd, "llama_prefill": lp,
                        "llama_prefill_threads": lp_t, "llama_decode": ld,
                        "llama_decode_threads": ld_t, "prefill_ratio": fp / lp,
                        "decode_ratio": fd / ld, "weights_mib": mb, "decode_read_share": share}
    print(f"{t:5s} prefill forge {fp:7.1f} llama.cpp {lp:7.1f} ({lp_t}t) x{fp/lp:.2f} | "
          f"decode forge {fd:6.1f} llama.cpp {ld:6.1f} ({ld_t}t) x{fd/ld:.2f} | "
          f"weights {mb:.1f} MiB, decode reads {share*100:.0f}% of {bw:.1f} GB/s")
print(json.dumps(out))
PY
