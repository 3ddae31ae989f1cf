"""torch.optim.AdamW with two param groups (weight decay / none), float64, for
tests/test_train.cpp: replays the optimizer steps a forge Trainer made, given the weights
before the first step and the gradient and learning rate of every step.

Usage: train_adamw.py IN.json OUT.json
IN  = {"params": [{"name", "shape", "value": [...], "decay": bool,
                   "grads": [[...] per step]}], "lrs": [...],
       "beta1", "beta2", "eps", "weight_decay"}
OUT = {"values": {name: [...]}}: the weights after all steps
"""
import json
import sys

import torch


def main():
    with open(sys.argv[1]) as f:
        inp = json.load(f)
    ps = []
    for p in inp["params"]:
        t = torch.tensor(p["value"], dtype=torch.float64).reshape(p["shape"]).requires_grad_(True)
        ps.append((p, t))
    groups = [{"params": [t for p, t in ps if p["decay"]], "weight_decay": inp["weight_decay"]},
              {"params": [t for p, t in ps if not p["decay"]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=inp["lrs"][0], betas=(inp["beta1"], inp["beta2"]),
                            eps=inp["eps"])
    for k, lr in enumerate(inp["lrs"]):
        for p, t in ps:
            t.grad = torch.tensor(p["grads"][k], dtype=torch.float64).reshape(p["shape"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
    out = {"values": {p["name"]: t.detach().reshape(-1).tolist() for p, t in ps}}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
