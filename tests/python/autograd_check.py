"""Float64 PyTorch reference for tests/test_torch_autograd.cpp.

A 1-layer GPT-2-like model written out by hand (no torch.nn modules, so the reference
spells out every step): token + position embedding, ln_1, qkv projection with bias, causal
attention with 1/sqrt(head_dim) scaling, output projection, residual, ln_2, MLP with tanh
GELU, residual, ln_f, tied LM head, mean cross-entropy. Computes the loss and the gradient
of every parameter with torch.autograd in float64.

Input JSON: {"config": {"n_head", "eps"}, "ids": [[...]], "targets": [[...]],
             "params": {name: {"shape": [...], "data": [...]}}}
Output JSON: {"loss": float, "grads": {name: [...] (flattened, row-major)}}
"""
import json
import math
import sys

import torch


def layernorm(x, w, b, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as GPT-2
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def main():
    with open(sys.argv[1]) as f:
        inp = json.load(f)
    cfg = inp["config"]
    n_head = cfg["n_head"]
    eps = cfg["eps"]
    p = {}
    for name, t in inp["params"].items():
        p[name] = torch.tensor(t["data"], dtype=torch.float64).reshape(t["shape"])
        p[name].requires_grad_(True)
    ids = torch.tensor(inp["ids"], dtype=torch.long)          # [B, T]
    targets = torch.tensor(inp["targets"], dtype=torch.long)  # [B, T]
    B, T = ids.shape
    C = p["wte"].shape[1]
    hd = C // n_head

    x = p["wte"][ids] + p["wpe"][torch.arange(T)][None, :, :]  # [B, T, C]

    h = layernorm(x, p["ln_1.w"], p["ln_1.b"], eps)
    qkv = h @ p["attn.w"] + p["attn.b"]  # [B, T, 3C], q|k|v, heads contiguous in each
    q, k, v = qkv.split(C, dim=-1)

    def heads(t):  # [B, T, C] -> [B, n_head, T, hd]
        return t.reshape(B, T, n_head, hd).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)  # [B, nh, T, T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)  # merge heads
    x = x + (y @ p["proj.w"] + p["proj.b"])

    h = layernorm(x, p["ln_2.w"], p["ln_2.b"], eps)
    h = gelu_tanh(h @ p["fc.w"] + p["fc.b"])
    x = x + (h @ p["fc2.w"] + p["fc2.b"])

    x = layernorm(x, p["ln_f.w"], p["ln_f.b"], eps)
    logits = x @ p["wte"].T  # tied LM head
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))
    loss.backward()

    out = {
        "loss": loss.item(),
        "grads": {name: t.grad.reshape(-1).tolist() for name, t in p.items()},
    }
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
