#!/bin/bash
# A GGUF file written by llama.cpp's own converter, for forge's tests to read: the HF golden
# model tests/data/golden/f16_50257 (made by HF transformers) with GPT-2's tokenizer files,
# through llama.cpp's convert_hf_to_gguf.py --outtype q8_0, into
# OUT_DIR/f16_50257.q8_0.gguf: the committed fixture tests/data/llamacpp/f16_50257.q8_0.gguf,
# which tests/test_llamacpp_converter_file.cpp reads (its tensors against forge's own q8_0
# bytes, its logits against HF's golden ones).
#   tools/llamacpp/convert_with_llamacpp.sh LLAMA_CPP_SOURCE OUT_DIR
# LLAMA_CPP_SOURCE: llama.cpp's source as node-llama-cpp ships it, a git bundle:
#   git clone tools/llamacpp/node_modules/node-llama-cpp/llama/gitRelease.bundle SRC
# (only convert_hf_to_gguf.py, conversion/ and gguf-py/ are used). Needs python3 with torch,
# numpy and transformers: the GPU machine has them (Debian packages no transformers), which
# is where the file is to be made. Run from the repository root after
# scripts/fetch_tokenizer.sh.
set -euo pipefail
src=$1
out=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp tests/data/golden/f16_50257/model.safetensors "$work/"
# llama.cpp's GPT-2 converter reads the context length as n_ctx (older HF configs had it
# beside n_positions; transformers 5 writes n_positions only).
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c.setdefault("n_ctx", c["n_positions"]); json.dump(c, open(sys.argv[2], "w"), indent=2)' \
  tests/data/golden/f16_50257/config.json "$work/config.json"
cp data/gpt2-tokenizer/encoder.json "$work/vocab.json"  # OpenAI's names for HF's two files
cp data/gpt2-tokenizer/vocab.bpe "$work/merges.txt"
mkdir -p "$out"
PYTHONPATH="$src/gguf-py" python3 "$src/convert_hf_to_gguf.py" "$work" --outtype q8_0 \
  --outfile "$out/f16_50257.q8_0.gguf"
