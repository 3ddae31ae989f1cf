#!/usr/bin/python3
"""PyTorch float64 references for tests/test_torch_ops.cpp.

Usage: ops_check.py IN.json OUT.json. IN holds {"tasks": {name: task}}; OUT gets
{name: result} with one result per task. Each task names an op (task["op"]) and carries
flat float lists plus shapes; results are flat float lists (or ints for the dropout mask).
Everything runs in float64 so that the only rounding under test is forge's float32.

The dropout mask is re-implemented here in plain Python integers from the formula in
include/forge/ops.h (no torch, no C++), so the C++ test can compare it bit for bit.
"""
import json
import sys

import torch
import torch.nn.functional as F

D = torch.float64
M32 = 0xFFFFFFFF


def t(values, shape):
    return torch.tensor(values, dtype=D).reshape(shape)


def flat(x):
    return x.detach().reshape(-1).tolist()


# ------------------------------------------------------------------ forward ops

def matmul(k):
    a = t(k["a"], k["a_shape"])
    b = t(k["b"], k["b_shape"])
    if k["trans_a"]:
        a = a.transpose(-1, -2)
    if k["trans_b"]:
        b = b.transpose(-1, -2)
    out = k["alpha"] * torch.matmul(a, b)
    if k.get("bias") is not None:
        out = out + t(k["bias"], [-1])
    return {"out": flat(out)}


def softmax_causal(k):
    x = t(k["x"], k["shape"])
    T, S = k["shape"][-2], k["shape"][-1]
    i = torch.arange(T).reshape(T, 1)
    j = torch.arange(S).reshape(1, S)
    masked = j > i + k["offset"]
    y = torch.softmax(x.masked_fill(masked, float("-inf")), dim=-1)
    return {"out": flat(y)}


def layernorm(k):
    x = t(k["x"], k["shape"])
    C = k["shape"][-1]
    y = F.layer_norm(x, (C,), t(k["gamma"], [C]), t(k["beta"], [C]), eps=k["eps"])
    return {"out": flat(y)}


def gelu(k):
    return {"out": flat(F.gelu(t(k["x"], [-1]), approximate="tanh"))}


# ------------------------------------------------------------------ training ops

def cross_entropy(k):
    logits = t(k["logits"], k["shape"]).requires_grad_(True)
    targets = torch.tensor(k["targets"], dtype=torch.long)
    nll = F.cross_entropy(logits, targets, reduction="none")
    # ce_bwd(logits, targets, scale) is the gradient of scale * sum(nll).
    (k["scale"] * nll.sum()).backward()
    return {"nll": flat(nll), "grad": flat(logits.grad)}


def layernorm_backward(k):
    C = k["shape"][-1]
    x = t(k["x"], k["shape"]).requires_grad_(True)
    gamma = t(k["gamma"], [C]).requires_grad_(True)
    beta = t(k["beta"], [C]).requires_grad_(True)
    y = F.layer_norm(x, (C,), gamma, beta, eps=k["eps"])
    y.backward(t(k["dy"], k["shape"]))
    return {"dx": flat(x.grad), "dgamma": flat(gamma.grad), "dbeta": flat(beta.grad)}


def adamw(k):
    p = t(k["param"], [-1]).requires_grad_(True)
    opt = torch.optim.AdamW([p], lr=k["lr"], betas=(k["beta1"], k["beta2"]), eps=k["eps"],
                            weight_decay=k["weight_decay"])
    for g in k["grads"]:
        p.grad = t(g, [-1])
        opt.step()
    state = opt.state[p]
    return {"param": flat(p), "m": flat(state["exp_avg"]), "v": flat(state["exp_avg_sq"])}


# ------------------------------------------------------------------ the dropout hash

def mix32(x):
    """lowbias32, in Python's unbounded integers reduced mod 2^32 after each product."""
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    x ^= x >> 16
    return x


def dropout_hash(seed, index):
    h = mix32((index & M32) ^ (seed & M32))
    return mix32(h ^ (seed >> 32) ^ (((index >> 32) * 0x9E3779B9) & M32))


def dropout(k):
    seed, p = k["seed"], k["p"]
    # p arrives as the exact double value of the float32 that forge uses.
    threshold = int(p * 16777216.0)
    keep = [1 if (dropout_hash(seed, i) >> 8) >= threshold else 0 for i in range(k["n"])]
    hashes = [dropout_hash(s, i) for s, i in k["hash_queries"]]
    return {"keep": keep, "hashes": hashes}


OPS = {
    "matmul": matmul,
    "softmax_causal": softmax_causal,
    "layernorm": layernorm,
    "gelu": gelu,
    "cross_entropy": cross_entropy,
    "layernorm_backward": layernorm_backward,
    "adamw": adamw,
    "dropout": dropout,
}


def main():
    with open(sys.argv[1]) as f:
        tasks = json.load(f)["tasks"]
    out = {name: OPS[task["op"]](task) for name, task in tasks.items()}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
