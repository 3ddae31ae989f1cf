#!/usr/bin/env python3
"""Writes a GPT-2 GGUF file (architecture "gpt2") with random weights.

DEVELOPMENT AID, not a reference: the weights are random, so the file is only good for exercising
llama.cpp through tools/llamacpp/run.mjs (loading, tokenizing, greedy decoding, probabilities,
benchmarking) before forge's own GGUF writer exists, and for bench/compare_llamacpp.sh until then.
Nothing it produces says anything about GPT-2's real outputs.

The tokenizer is the real GPT-2 one (data/gpt2-tokenizer/encoder.json and vocab.bpe, fetched by
scripts/fetch_tokenizer.sh), so llama.cpp tokenizes text exactly like GPT-2.

Layout (as llama.cpp's gpt2 loader reads it; ggml's ne0 is the fastest-varying dimension, so a
linear layer's weight has ne = [in, out], i.e. it is stored row-major as [out][in]):
  token_embd.weight      ne [n_embd, n_vocab]   (also the output head: no output.weight, tied)
  position_embd.weight   ne [n_embd, n_ctx]
  blk.N.attn_norm.{weight,bias}   [n_embd]
  blk.N.attn_qkv.weight  [n_embd, 3*n_embd]  bias [3*n_embd]   (rows: q, then k, then v)
  blk.N.attn_output.weight [n_embd, n_embd] bias [n_embd]
  blk.N.ffn_norm.{weight,bias}    [n_embd]
  blk.N.ffn_up.weight    [n_embd, n_ff]     bias [n_ff]
  blk.N.ffn_down.weight  [n_ff, n_embd]     bias [n_embd]
  output_norm.{weight,bias}       [n_embd]
With --dtype f16 the 2-D tensors are F16 and the 1-D ones (norms, biases) stay F32, as llama.cpp's
converter does (general.file_type 1 = MOSTLY_F16); --dtype f32 writes everything F32 (file_type 0).

Python standard library only. Usage:
  python3 tools/llamacpp/make_test_gguf.py --preset tiny --dtype f32 --out out/tiny-f32.gguf
  python3 tools/llamacpp/make_test_gguf.py --preset gpt2 --dtype f16 --out out/gpt2-f16.gguf
"""
import argparse
import json
import os
import random
import struct
import sys

PRESETS = {
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, n_ctx=128),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, n_ctx=1024),
}

# GGUF value types (gguf.h)
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types
GGML_F32, GGML_F16 = 0, 1
ALIGNMENT = 32
POOL = 1048573  # a prime: tensors are cyclic windows of one pool of normals, so rows never repeat


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == T_STRING:
        return out + gguf_str(value)
    if vtype == T_UINT32:
        return out + struct.pack("<I", value)
    if vtype == T_INT32:
        return out + struct.pack("<i", value)
    if vtype == T_FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == T_BOOL:
        return out + struct.pack("<?", value)
    raise ValueError(vtype)


def kv_array(key, etype, values):
    out = [gguf_str(key), struct.pack("<IIQ", T_ARRAY, etype, len(values))]
    if etype == T_STRING:
        out.extend(gguf_str(v) for v in values)
    elif etype == T_INT32:
        out.append(struct.pack(f"<{len(values)}i", *values))
    else:
        raise ValueError(etype)
    return b"".join(out)


def load_tokenizer(tok_dir):
    enc_path = os.path.join(tok_dir, "encoder.json")
    bpe_path = os.path.join(tok_dir, "vocab.bpe")
    if not (os.path.isfile(enc_path) and os.path.isfile(bpe_path)):
        die(f"{enc_path} / {bpe_path} missing (run scripts/fetch_tokenizer.sh)")
    with open(enc_path, encoding="utf-8") as f:
        encoder = json.load(f)
    tokens = [None] * len(encoder)
    for tok, i in encoder.items():
        tokens[i] = tok
    if any(t is None for t in tokens):
        die("encoder.json ids are not 0..n-1")
    with open(bpe_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    merges = [ln for ln in lines if ln.strip()]
    return tokens, merges


class Weights:
    """Random tensor bytes: a pool of standard normals, cut into cyclic windows at random offsets."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.pool = [self.rng.gauss(0.0, 1.0) for _ in range(POOL)]
        self.cache = {}

    def _pool_bytes(self, std, mean, fmt):
        key = (std, mean, fmt)
        if key not in self.cache:
            vals = [mean + std * g for g in self.pool]
            self.cache[key] = struct.pack(f"<{len(vals)}{fmt}", *vals)
        return self.cache[key]

    def tensor(self, n, std, mean, dtype):
        fmt, size = ("f", 4) if dtype == GGML_F32 else ("e", 2)
        pool = self._pool_bytes(std, mean, fmt)
        start = self.rng.randrange(POOL) * size
        need = n * size
        chunks = [pool[start:]]
        have = len(chunks[0])
        while have < need:
            chunks.append(pool)
            have += len(pool)
        return b"".join(chunks)[:need]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--out", required=True, help="output .gguf path")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--gain", type=float, default=8.0,
                    help="default std of the linear weights and token_embd is gain/sqrt(n_embd) (default 8: "
                         "far above GPT-2's 0.02, so that the next-token distribution is peaked and greedy "
                         "decoding does not just repeat the last input token)")
    ap.add_argument("--std", type=float, default=None, help="std of the linear weights (overrides --gain)")
    ap.add_argument("--embd-std", type=float, default=None,
                    help="std of token_embd, which is also the tied output head (overrides --gain)")
    ap.add_argument("--tokenizer-dir", default=None,
                    help="folder with encoder.json and vocab.bpe (default: data/gpt2-tokenizer)")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tok_dir = args.tokenizer_dir or os.path.join(root, "data", "gpt2-tokenizer")
    tokens, merges = load_tokenizer(tok_dir)
    n_vocab = len(tokens)
    eot = tokens.index("<|endoftext|>") if "<|endoftext|>" in tokens else n_vocab - 1

    p = PRESETS[args.preset]
    n_layer, n_head, n_embd, n_ctx = p["n_layer"], p["n_head"], p["n_embd"], p["n_ctx"]
    n_ff = 4 * n_embd
    wtype = GGML_F32 if args.dtype == "f32" else GGML_F16
    w = Weights(args.seed)
    if args.std is None:
        args.std = args.gain / n_embd ** 0.5
    if args.embd_std is None:
        args.embd_std = args.gain / n_embd ** 0.5
    proj_std = args.std / (2 * n_layer) ** 0.5  # GPT-2's scaled init of the residual projections

    # (name, ne, std, mean, type); 1-D tensors are always F32
    specs = [("token_embd.weight", [n_embd, n_vocab], args.embd_std, 0.0, wtype),
             ("position_embd.weight", [n_embd, n_ctx], 0.01, 0.0, wtype)]
    for i in range(n_layer):
        b = f"blk.{i}."
        specs += [
            (b + "attn_norm.weight", [n_embd], 0.1, 1.0, GGML_F32),
            (b + "attn_norm.bias", [n_embd], 0.02, 0.0, GGML_F32),
            (b + "attn_qkv.weight", [n_embd, 3 * n_embd], args.std, 0.0, wtype),
            (b + "attn_qkv.bias", [3 * n_embd], 0.02, 0.0, GGML_F32),
            (b + "attn_output.weight", [n_embd, n_embd], proj_std, 0.0, wtype),
            (b + "attn_output.bias", [n_embd], 0.02, 0.0, GGML_F32),
            (b + "ffn_norm.weight", [n_embd], 0.1, 1.0, GGML_F32),
            (b + "ffn_norm.bias", [n_embd], 0.02, 0.0, GGML_F32),
            (b + "ffn_up.weight", [n_embd, n_ff], args.std, 0.0, wtype),
            (b + "ffn_up.bias", [n_ff], 0.02, 0.0, GGML_F32),
            (b + "ffn_down.weight", [n_ff, n_embd], proj_std, 0.0, wtype),
            (b + "ffn_down.bias", [n_embd], 0.02, 0.0, GGML_F32),
        ]
    specs += [("output_norm.weight", [n_embd], 0.1, 1.0, GGML_F32),
              ("output_norm.bias", [n_embd], 0.02, 0.0, GGML_F32)]

    token_type = [1] * n_vocab
    token_type[eot] = 3  # control
    meta = [
        kv("general.architecture", T_STRING, "gpt2"),
        kv("general.name", T_STRING, f"forge random gpt2 ({args.preset}, {args.dtype}, seed {args.seed})"),
        kv("general.file_type", T_UINT32, 0 if wtype == GGML_F32 else 1),
        kv("general.alignment", T_UINT32, ALIGNMENT),
        kv("gpt2.context_length", T_UINT32, n_ctx),
        kv("gpt2.embedding_length", T_UINT32, n_embd),
        kv("gpt2.feed_forward_length", T_UINT32, n_ff),
        kv("gpt2.block_count", T_UINT32, n_layer),
        kv("gpt2.attention.head_count", T_UINT32, n_head),
        kv("gpt2.attention.layer_norm_epsilon", T_FLOAT32, 1e-5),
        kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        kv("tokenizer.ggml.pre", T_STRING, "gpt-2"),
        kv_array("tokenizer.ggml.tokens", T_STRING, tokens),
        kv_array("tokenizer.ggml.token_type", T_INT32, token_type),
        kv_array("tokenizer.ggml.merges", T_STRING, merges),
        kv("tokenizer.ggml.bos_token_id", T_UINT32, eot),
        kv("tokenizer.ggml.eos_token_id", T_UINT32, eot),
        kv("tokenizer.ggml.add_bos_token", T_BOOL, False),
    ]

    def pad(n):
        return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT

    infos, offset = [], 0
    for name, ne, _, _, t in specs:
        n = 1
        for d in ne:
            n *= d
        infos.append(gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                     + struct.pack("<IQ", t, offset))
        offset += n * (4 if t == GGML_F32 else 2)
        offset += pad(offset)

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        head = b"GGUF" + struct.pack("<IQQ", 3, len(specs), len(meta)) + b"".join(meta) + b"".join(infos)
        f.write(head + b"\0" * pad(len(head)))
        for name, ne, std, mean, t in specs:
            n = 1
            for d in ne:
                n *= d
            if len(ne) == 1:
                data = struct.pack(f"<{n}f", *(mean + w.rng.gauss(0.0, std) for _ in range(n)))
            else:
                data = w.tensor(n, std, mean, t)
            f.write(data + b"\0" * pad(len(data)))
    os.replace(tmp, args.out)
    print(json.dumps({"out": args.out, "preset": args.preset, "dtype": args.dtype, "n_vocab": n_vocab,
                      "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "n_ctx": n_ctx,
                      "tensors": len(specs), "bytes": os.path.getsize(args.out)}))


if __name__ == "__main__":
    main()
