#!/usr/bin/env bash
# forge's fuzzing (docs/RELIABILITY.md): builds the libFuzzer harnesses with clang, ASan and
# UBSan into build-fuzz/, and runs them over the committed corpora in fuzz/corpus/.
#
#   bash fuzz/run.sh build                 configure and build every harness
#   bash fuzz/run.sh smoke [SECONDS]       CI: replay every corpus and regression input, then
#                                          fuzz each harness SECONDS (default 5) from its corpus
#                                          (FORGE_JOBS harnesses at a time)
#   bash fuzz/run.sh fuzz NAME RUNS        a long run of harness NAME (e.g. safetensors): RUNS
#                                          executions, new inputs into a scratch corpus; prints
#                                          libFuzzer's last report (execs, cov:, ft:)
#   bash fuzz/run.sh seeds                 write valid seed files (fuzz_seeds) and merge the ones
#                                          that add coverage into fuzz/corpus/
#   bash fuzz/run.sh minimize NAME DIR...  merge DIR... into NAME's corpus, keeping a minimal set
#
# Every run: -rss_limit_mb=2048 and -malloc_limit_mb=2048 (an input that makes forge ask for
# more is a finding), -timeout=10 s per input, and the harness's dictionary.
# Environment: FORGE_FUZZ_BUILD_DIR (default build-fuzz), FORGE_JOBS (compile jobs).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${FORGE_FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${FORGE_JOBS:-$(nproc)}"
limits=(-rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10)
harnesses() { for f in fuzz/fuzz_*.cpp; do basename "$f" .cpp; done; }
dict_of() {  # the dictionary flag of harness $1, if it has one
  local d="fuzz/dict/${1#fuzz_}.dict"
  if [[ -f "$d" ]]; then echo "-dict=$d"; fi
}
die() { echo "fuzz/run.sh: $*" >&2; exit 1; }

cmd="${1:-}"
case "$cmd" in
  build)
    command -v clang++ >/dev/null || die "clang++ missing (scripts/setup.sh installs clang)"
    CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFORGE_FUZZ=ON \
      -DFORGE_CPU_ONLY=ON -DFORGE_TESTS=OFF -DFORGE_BENCH=OFF -DFORGE_OPENBLAS=OFF \
      -DFORGE_WERROR=ON >/dev/null
    cmake --build "$build" -j "$jobs" --target fuzz
    ;;
  smoke)
    seconds="${2:-5}"
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    # Harness $1 over its corpus and regression inputs, then fuzzed $seconds s; its exit
    # status goes to $scratch/$1.rc (the function itself always succeeds).
    smoke_one() {
      local h="$1" corpus="fuzz/corpus/${1#fuzz_}"
      local inputs=("$corpus")
      [[ -d "fuzz/regressions/${h#fuzz_}" ]] && inputs+=("fuzz/regressions/${h#fuzz_}")
      mkdir -p "$scratch/$h"
      # The new inputs go to the scratch folder (the first one): the committed corpus stays.
      local rc=0
      "$build/$h" "$scratch/$h" "${inputs[@]}" "${limits[@]}" $(dict_of "$h") \
        -artifact_prefix="$scratch/$h-" -max_total_time="$seconds" -print_final_stats=1 \
        >"$scratch/$h.log" 2>&1 || rc=$?
      echo "$rc" >"$scratch/$h.rc"
    }
    for h in $(harnesses); do
      [[ -d "fuzz/corpus/${h#fuzz_}" ]] || die "$h has no corpus (fuzz/corpus/${h#fuzz_})"
    done
    # One harness per core at a time (each fuzzes on one thread).
    running=0
    for h in $(harnesses); do
      smoke_one "$h" &
      running=$((running + 1))
      if ((running >= jobs)); then
        wait -n
        running=$((running - 1))
      fi
    done
    wait
    for h in $(harnesses); do
      if [[ "$(cat "$scratch/$h.rc")" != 0 ]]; then
        tail -n 60 "$scratch/$h.log" >&2
        die "$h failed (its report is above)"
      fi
      printf '%-28s %s runs, %s\n' "$h" "$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$h.log")" \
        "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$scratch/$h.log" | tail -1)"
    done
    ;;
  fuzz)
    [[ $# -eq 3 ]] || die "usage: fuzz/run.sh fuzz NAME RUNS"
    h="fuzz_${2#fuzz_}"
    [[ -x "$build/$h" ]] || die "no harness $build/$h (fuzz/run.sh build)"
    new="$build/new_corpus/${h#fuzz_}"
    mkdir -p "$new"
    "$build/$h" "$new" "fuzz/corpus/${h#fuzz_}" "${limits[@]}" $(dict_of "$h") -runs="$3" \
      -print_final_stats=1 -artifact_prefix="$build/crash-${h#fuzz_}-" 2>&1 |
      grep -E '^#[0-9]+[[:space:]]+(DONE|INITED)|stat::|ERROR|SUMMARY|crash|leak|timeout|oom' || true
    ;;
  seeds)
    seeds="$build/seeds"
    rm -rf "$seeds"
    FORGE_FUZZ_TOKENIZER="${FORGE_FUZZ_TOKENIZER:-data/gpt2-tokenizer}" "$build/fuzz_seeds" "$seeds"
    cp "$seeds/cli_args.dict" fuzz/dict/cli_args.dict
    for h in $(harnesses); do
      mkdir -p "fuzz/corpus/${h#fuzz_}"
      [[ -d "$seeds/$h" ]] && "$build/$h" -merge=1 "fuzz/corpus/${h#fuzz_}" "$seeds/$h" \
        "${limits[@]}" >/dev/null 2>&1
    done
    ;;
  minimize)
    [[ $# -ge 3 ]] || die "usage: fuzz/run.sh minimize NAME DIR..."
    h="fuzz_${2#fuzz_}"
    shift 2
    corpus="fuzz/corpus/${h#fuzz_}"
    fresh="$build/minimized/${h#fuzz_}"
    rm -rf "$fresh" && mkdir -p "$fresh"
    "$build/$h" -merge=1 "$fresh" "$corpus" "$@" "${limits[@]}" 2>&1 | grep -E 'MERGE-OUTER' || true
    rm -rf "$corpus" && mv "$fresh" "$corpus"
    echo "$corpus: $(ls "$corpus" | wc -l) inputs, $(du -sh "$corpus" | cut -f1)"
    ;;
  *)
    sed -n '2,17p' "$0" >&2
    exit 1
    ;;
esac
