"""A plain-PyTorch GPT-2 trainer, float64, written independently of forge, for
tests/test_train.cpp: same initial weights (read from the model.safetensors forge wrote, with
a small reader of its own), same batches, same AdamW / clipping / schedule, no dropout.

Usage: train_reference.py IN.json OUT.json
IN  = {"weights": path, "config": {n_layer, n_head, n_embd, n_ctx, vocab_size, eps},
       "hyper": {steps, lr, min_lr_ratio, warmup, beta1, beta2, eps, weight_decay, clip},
       "steps": [[{"inputs": [[...]], "targets": [[...]]}, ... micro-batches], ... steps]}
OUT = {"losses": [...], "grad_norms": [...], "lrs": [...], "final": {name: [values]}}
The model: x = wte[ids] + wpe[pos]; per block x += proj(attn(ln_1 x)); x += mlp(ln_2 x);
logits = ln_f(x) @ wte^T (tied). AdamW groups: weight decay on tensors of rank >= 2 only.
The learning rate: lr (k + 1) / warmup for k < warmup, then a cosine to lr * min_lr_ratio at
k = steps.
"""
import json
import math
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + b:base + e]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]).to(torch.float64)
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w, cfg, inputs, targets):
    B, T = inputs.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    hd = C // H
    eps = cfg["eps"]
    x = w["wte.weight"][inputs] + w["wpe.weight"][torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        h = torch.nn.functional.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.reshape(B, T, H, hd).transpose(1, 2)
        k = k.reshape(B, T, H, hd).transpose(1, 2)
        v = v.reshape(B, T, H, hd).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h2 = torch.nn.functional.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        f = gelu_tanh(h2 @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x @ w["wte.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def lr_at(h, k):
    if k < h["warmup"]:
        return h["lr"] * (k + 1) / h["warmup"]
    min_lr = h["lr"] * h["min_lr_ratio"]
    if k >= h["steps"] or h["steps"] <= h["warmup"]:
        return min_lr
    ratio = (k - h["warmup"]) / (h["steps"] - h["warmup"])
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (h["lr"] - min_lr)


def main():
    with open(sys.argv[1]) as f:
        inp = json.load(f)
    torch.set_num_threads(1)
    cfg, h = inp["config"], inp["hyper"]
    w = {k: v.clone().requires_grad_(True) for k, v in read_safetensors(inp["weights"]).items()}
    decay = [t for t in w.values() if t.dim() >= 2]
    no_decay = [t for t in w.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
    losses, norms, lrs = [], [], []
    for k, micro in enumerate(inp["steps"]):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for mb in micro:
            loss = forward(w, cfg, torch.tensor(mb["inputs"]), torch.tensor(mb["targets"]))
            (loss / len(micro)).backward()
            total += loss.item() / len(micro)
        params = list(w.values())
        if h["clip"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, h["clip"]).item()
        else:
            norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params))
        lr = lr_at(h, k)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(total)
        norms.append(norm)
        lrs.append(lr)
    out = {"losses": losses, "grad_norms": norms, "lrs": lrs,
           "final": {k: v.detach().reshape(-1).tolist() for k, v in w.items()}}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
