#!/usr/bin/python3
"""PyTorch peer of `forge bench --preset NAME`'s training figure: GPT-2 train-step speed.

Debian's PyTorch (torch 1.13, /usr/bin/python3), fp32, CPU, random weights with GPT-2 init
(the model of bench/pytorch_gpt2.py, made trainable). One step = forward of B x T random
tokens, mean cross-entropy, backward, global grad-norm clip at 1.0, AdamW (lr 6e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only) — the work of forge's Trainer::step.
A warm-up step, then the median of --steps timed ones. Prints one JSON object.

With --ranks N > 1: data parallelism as PyTorch users run it on CPUs, N processes with
DistributedDataParallel over Gloo (its 25 MB gradient buckets, summed while the backward
pass runs), each taking batch / N sequences of every global batch; rank 0's step times.

  /usr/bin/python3 bench/pytorch_train_gpt2.py [--preset gpt2] [--batch 4] [--seq 64]
      [--steps 3] [--threads 2] [--ranks 1]
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2 import GPT2, PRESETS, gelu_new  # noqa: E402


def params_of(m):
    ps = [m.wte, m.wpe, m.lnf_w, m.lnf_b]
    for w in m.layers:
        ps += list(w.values())
    return ps


def loss_of(m, ids, targets):
    B, T = ids.shape
    C, H = m.C, m.H
    hd = C // H
    x = m.wte[ids] + m.wpe[:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    for w in m.layers:
        h = torch.nn.functional.layer_norm(x, (C,), w["ln1_w"], w["ln1_b"], 1e-5)
        qkv = torch.addmm(w["attn_b"], h.view(B * T, C), w["attn_w"]).view(B, T, 3, H, hd)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # [B, H, T, hd]
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B * T, C)
        x = x + torch.addmm(w["proj_b"], y, w["proj_w"]).view(B, T, C)
        h = torch.nn.functional.layer_norm(x, (C,), w["ln2_w"], w["ln2_b"], 1e-5)
        f = gelu_new(torch.addmm(w["fc_b"], h.view(B * T, C), w["fc_w"]))
        x = x + torch.addmm(w["fcp_b"], f, w["fcp_w"]).view(B, T, C)
    h = torch.nn.functional.layer_norm(x, (C,), m.lnf_w, m.lnf_b, 1e-5)
    logits = h.view(B * T, C) @ m.wte.t()
    return torch.nn.functional.cross_entropy(logits, targets.reshape(-1))


class Net(torch.nn.Module):
    """The model's tensors as registered Parameters, so that DistributedDataParallel sees them."""

    def __init__(self, m):
        super().__init__()
        for name in ("wte", "wpe", "lnf_w", "lnf_b"):
            setattr(m, name, torch.nn.Parameter(getattr(m, name).detach()))
        for w in m.layers:
            for k in list(w):
                w[k] = torch.nn.Parameter(w[k].detach())
        self.m = m
        self.ps = torch.nn.ParameterList(params_of(m))

    def forward(self, ids, targets):
        return loss_of(self.m, ids, targets)


def run(rank, a, result):
    """One process's training: the whole batch (ranks 1), or its slice of it under DDP."""
    torch.set_num_threads(a.threads)
    if a.ranks > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port,
                                rank=rank, world_size=a.ranks)
    L, H, C, P, V = PRESETS[a.preset]
    T = min(a.seq, P)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    m = GPT2(L, H, C, P, V, gen)
    net = Net(m)
    ps = params_of(m)
    model = net
    if a.ranks > 1:
        model = torch.nn.parallel.DistributedDataParallel(net)
    decay = [p for p in ps if p.dim() >= 2]
    no_decay = [p for p in ps if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    init_s = time.perf_counter() - t0
    local = a.batch // a.ranks
    times, losses = [], []
    for i in range(a.steps + 1):
        tokens = torch.randint(0, V, (a.batch, T + 1), generator=gen)  # the global batch
        mine = tokens[rank * local:(rank + 1) * local]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(mine[:, :-1], mine[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt.step()
        dt = time.perf_counter() - t
        losses.append(loss.item())
        if i > 0:
            times.append(dt)
    if rank == 0:
        step = statistics.median(times)
        result.update({
            "preset": a.preset, "torch": torch.__version__, "threads": a.threads,
            "ranks": a.ranks, "train_batch": a.batch, "train_seq": T, "steps": a.steps,
            "train_step_ms": step * 1e3, "train_tok_s": a.batch * T / step,
            "losses": losses,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "init_s": init_s})


def ddp_worker(rank, a, queue):
    result = {}
    run(rank, a, result)
    if rank == 0:
        queue.put(result)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--port", type=int, default=29517)
    a = ap.parse_args()
    if a.ranks < 1 or a.batch % a.ranks != 0:
        sys.exit("error: --batch must be a multiple of --ranks")
    result = {}
    if a.ranks == 1:
        run(0, a, result)
    else:
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        mp.spawn(ddp_worker, args=(a, queue), nprocs=a.ranks, join=True)
        result = queue.get()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
