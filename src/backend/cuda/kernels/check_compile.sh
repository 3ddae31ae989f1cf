#!/usr/bin/env bash
# Compile check of the CUDA kernels without a GPU: concatenates common.cuh and every *.cu of
# this directory (alphabetical order, as the host does before handing the source to NVRTC)
# into /tmp/forge_cuda_all.cu, compiles it to PTX with nvcc for sm_90, and lists the kernels
# (.entry names) found. Fails on any error or warning. Note: nvcc pre-includes
# cuda_runtime.h and NVRTC does not, so this cannot catch a use of a runtime-header-only name.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
src=/tmp/forge_cuda_all.cu
ptx=/tmp/forge_cuda_all.ptx

{
  cat "$dir/common.cuh"
  for f in $(cd "$dir" && LC_ALL=C ls -1 -- *.cu); do
    printf '\n// ---- %s ----\n' "$f"
    cat "$dir/$f"
  done
} > "$src"

log="$("$nvcc" --ptx -arch=sm_90 -std=c++17 -Xcudafe --display_error_number -o "$ptx" "$src" \
  2>&1)" || {
  printf '%s\n' "$log"
  echo "check_compile: nvcc failed" >&2
  exit 1
}
if [ -n "$log" ]; then
  printf '%s\n' "$log"
  echo "check_compile: nvcc printed warnings" >&2
  exit 1
fi
echo "check_compile: OK, $(grep -c '^\.visible \.entry' "$ptx") kernels in $ptx:"
grep -o '\.entry [A-Za-z0-9_]*' "$ptx" | sed 's/^\.entry /  /'
