#!/usr/bin/python3
"""Independent float64 GPT-2 reference for forge's tests (Debian python3-torch).

Usage: gpt2_reference.py IN.json OUT.json, IN = {"cmd": ..., ...}:

  {"cmd": "make", "dir": D, "config": {HF config fields}, "seed": int,
   "dtype": "F32"|"F16"|"BF16", "prefix": bool, "untied": bool, "shards": int,
   "extra_buffers": bool}
      Writes a model folder D (config.json + model.safetensors, or `shards` shard files
      plus model.safetensors.index.json) with random weights large enough that logits are
      O(1) (so that errors show), tensor names with or without "transformer.", optionally an
      untied lm_head.weight and the old attn.bias / attn.masked_bias buffers.
      OUT = {"tensors": [names]}.

  {"cmd": "batch", "requests": [IN, ...]}  ->  OUT = {"results": [OUT, ...]}

  {"cmd": "forward", "dir": D, "ids": [[...], ...], "greedy": n}
      Reads D with its own safetensors parser, runs GPT-2 by hand in float64 and writes
      OUT = {"logits": [B][T][V], "loss": HF's loss with labels = input_ids (mean over
      B (T - 1) targets), "greedy": [B][n] greedy continuation tokens (full recompute per
      step)}.

  {"cmd": "eval", "dir": D, "ids": [...], "window": W, "stride": S}
      OUT = {"loss": windowed loss as documented for forge::gpt2::evaluate, "windows": k}.

Nothing here shares code with forge: the safetensors parsing, the model and the loss are
written from the format description and the GPT-2 definition.
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


# ------------------------------------------------------------------------------ safetensors

def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype, _ = DTYPES[entry["dtype"]]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.zeros(0, dtype=dtype)
        out[name] = t.reshape(entry["shape"]).to(torch.float64)
    return out


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float64 tensor); stored as `dtype`."""
    torch_dtype, size = DTYPES[dtype]
    header, chunks, offset = {}, [], 0
    for name, t in tensors:
        flat = t.to(torch_dtype).contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def read_model_dir(d):
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(os.path.join(d, shard)))
    return out


# ------------------------------------------------------------------------------ make

def make(req):
    cfg = req["config"]
    d = req["dir"]
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(req.get("seed", 0))
    C, V, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_layer"]
    P = cfg.get("n_positions", cfg.get("n_ctx"))

    def rnd(*shape, std=1.0, mean=0.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std + mean

    prefix = "transformer." if req.get("prefix", False) else ""
    ts = [(prefix + "wte.weight", rnd(V, C, std=0.3)), (prefix + "wpe.weight", rnd(P, C, std=0.5))]
    for i in range(L):
        p = f"{prefix}h.{i}."
        ts += [
            (p + "ln_1.weight", rnd(C, std=0.1, mean=1.0)), (p + "ln_1.bias", rnd(C, std=0.1)),
            (p + "attn.c_attn.weight", rnd(C, 3 * C, std=0.3)),
            (p + "attn.c_attn.bias", rnd(3 * C, std=0.1)),
            (p + "attn.c_proj.weight", rnd(C, C, std=0.3)),
            (p + "attn.c_proj.bias", rnd(C, std=0.1)),
            (p + "ln_2.weight", rnd(C, std=0.1, mean=1.0)), (p + "ln_2.bias", rnd(C, std=0.1)),
            (p + "mlp.c_fc.weight", rnd(C, 4 * C, std=0.3)),
            (p + "mlp.c_fc.bias", rnd(4 * C, std=0.1)),
            (p + "mlp.c_proj.weight", rnd(4 * C, C, std=0.15)),
            (p + "mlp.c_proj.bias", rnd(C, std=0.1)),
        ]
        if req.get("extra_buffers", False):
            # What old exports carry: the causal mask and masked_bias buffers (ignored).
            ts += [(p + "attn.bias", torch.tril(torch.ones(1, 1, P, P, dtype=torch.float64))),
                   (p + "attn.masked_bias", torch.tensor(-1e4, dtype=torch.float64))]
    ts += [(prefix + "ln_f.weight", rnd(C, std=0.1, mean=1.0)),
           (prefix + "ln_f.bias", rnd(C, std=0.1))]
    if req.get("untied", False):
        ts.append(("lm_head.weight", rnd(V, C, std=0.3)))
        cfg = dict(cfg, tie_word_embeddings=False)

    shards = req.get("shards", 1)
    dtype = req.get("dtype", "F32")
    if shards <= 1:
        write_safetensors(os.path.join(d, "model.safetensors"), ts, dtype)
    else:
        weight_map, per = {}, math.ceil(len(ts) / shards)
        for s in range(shards):
            part = ts[s * per:(s + 1) * per]
            name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(os.path.join(d, name), part, dtype)
            weight_map.update({n: name for n, _ in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return {"tensors": [n for n, _ in ts]}


# ------------------------------------------------------------------------------ forward

def layernorm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(W, cfg, ids):
    """ids: LongTensor [B, T] -> float64 logits [B, T, V]."""
    get = lambda n: W["transformer." + n] if "transformer." + n in W else W[n]
    C, H = cfg["n_embd"], cfg["n_head"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    hd = C // H
    B, T = ids.shape
    x = get("wte.weight")[ids] + get("wpe.weight")[:T][None]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        h = layernorm(x, get(p + "ln_1.weight"), get(p + "ln_1.bias"), eps)
        qkv = h @ get(p + "attn.c_attn.weight") + get(p + "attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=-1)
        heads = lambda t: t.reshape(B, T, H, hd).transpose(1, 2)  # [B, H, T, hd]
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ get(p + "attn.c_proj.weight") + get(p + "attn.c_proj.bias")
        h = layernorm(x, get(p + "ln_2.weight"), get(p + "ln_2.bias"), eps)
        f = gelu_tanh(h @ get(p + "mlp.c_fc.weight") + get(p + "mlp.c_fc.bias"))
        x = x + f @ get(p + "mlp.c_proj.weight") + get(p + "mlp.c_proj.bias")
    x = layernorm(x, get("ln_f.weight"), get("ln_f.bias"), eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else get("wte.weight")
    return x @ head.T


def forward(req):
    d = req["dir"]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = read_model_dir(d)
    ids = torch.tensor(req["ids"], dtype=torch.long)
    logits = gpt2_logits(W, cfg, ids)
    B, T, V = logits.shape
    out = {"logits": logits.tolist()}
    if T >= 2:
        lp = logits[:, :-1].log_softmax(-1)
        nll = -lp.gather(-1, ids[:, 1:, None])[..., 0]
        out["loss"] = nll.mean().item()
    n = req.get("greedy", 0)
    if n:
        seq = ids.clone()
        for _ in range(n):
            nxt = gpt2_logits(W, cfg, seq)[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
        out["greedy"] = seq[:, T:].tolist()
    return out


def evaluate(req):
    """Windowed loss of one sequence, as forge documents it, formulated per target: target i
    (1 <= i < n) belongs to window k = (i - 1) // stride, whose targets end at
    e = min((k + 1) * stride, n - 1); that window's inputs are ids[max(0, e - W) : e], and
    target i is predicted at its position i - 1 - max(0, e - W)."""
    d = req["dir"]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = read_model_dir(d)
    ids = req["ids"]
    n, win, stride = len(ids), req["window"], req["stride"]
    total, cache = 0.0, {}
    for i in range(1, n):
        k = (i - 1) // stride
        e = min((k + 1) * stride, n - 1)
        b = max(0, e - win)
        if (b, e) not in cache:
            x = torch.tensor([ids[b:e]], dtype=torch.long)
            cache[(b, e)] = gpt2_logits(W, cfg, x)[0].log_softmax(-1)
        total -= cache[(b, e)][i - 1 - b, ids[i]].item()
    return {"loss": total / (n - 1), "windows": len(cache)}


def main():
    with open(sys.argv[1]) as f:
        req = json.load(f)
    cmds = {"make": make, "forward": forward, "eval": evaluate}
    if req["cmd"] == "batch":
        out = {"results": [cmds[r["cmd"]](r) for r in req["requests"]]}
    else:
        out = cmds[req["cmd"]](req)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
