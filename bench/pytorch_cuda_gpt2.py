#!/usr/bin/env python3
"""GPU peer of `forge bench` on the same machine: HF transformers GPT-2 in PyTorch, fp32, CUDA.

Random GPT-2 init of the preset's shapes (GPT2Config, no download), TF32 off (plain fp32
arithmetic, what forge's fp32 GPU kernels do; --tf32 turns it on), eager mode, the model as people run it. Times:
  prefill  a forward of batch x P random tokens with use_cache (median of 5 after 2 warm-ups);
  decode   N KV-cache steps of batch x 1 tokens after a P-token prefill, each fed the argmax
           of the last logits, read back to the host like a generation loop does;
  train    optimizer steps (forward, mean cross-entropy, backward, clip 1.0, AdamW lr 6e-4
           betas 0.9/0.95 eps 1e-8 decay 0.1 on matrices) of B x T random tokens;
  matmul   torch.matmul of n x n x n fp32: the fp32 rate this GPU reaches through cuBLAS.
CUDA events time the GPU work; decode uses the wall clock (it includes the readback, as
forge's does). Prints one JSON object.

  python3 bench/pytorch_cuda_gpt2.py [--preset gpt2] [--prompt-tokens 1024]
      [--decode-prompt 128] [--decode-tokens 256] [--train-batch 16] [--train-seq 1024]
      [--train-steps 20] [--matmul 4096] [--tf32] [--bf16] [--compile] [--graph-decode]
--graph-decode adds the decode with the whole step captured as one CUDA graph over a static
KV cache (bench/pytorch_graph_decode.py), with fp32 and with bf16 weights.
--bf16 runs the training step's forward and loss under torch.autocast(bfloat16) (fp32
weights, AdamW state and gradients, as people train with it); --compile wraps the model in
torch.compile (default mode; its compile happens in the warm-up steps).
"""
import argparse
import json
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from pytorch_graph_decode import bench_graph_decode

PRESETS = {  # n_layer, n_head, n_embd, n_ctx, vocab
    "gpt2": (12, 12, 768, 1024, 50257),
    "gpt2-medium": (24, 16, 1024, 1024, 50257),
    "mini": (4, 4, 256, 256, 50257),
}


def model_of(preset, dropout=0.0):
    L, H, C, P, V = PRESETS[preset]
    cfg = GPT2Config(n_layer=L, n_head=H, n_embd=C, n_positions=P, vocab_size=V,
                     resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    torch.manual_seed(1)
    return GPT2LMHeadModel(cfg).cuda(), cfg


def gpu_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


@torch.no_grad()
def bench_prefill(model, cfg, P):
    ids = torch.randint(0, cfg.vocab_size, (1, P), device="cuda")
    ms = gpu_ms(lambda: model(ids, use_cache=True), 2, 5)
    return {"prefill_tokens": P, "prefill_ms": ms, "prefill_tok_s": P / ms * 1e3}


@torch.no_grad()
def bench_decode(model, cfg, P, N):
    ids = torch.randint(0, cfg.vocab_size, (1, P), device="cuda")
    for rep in range(2):  # the first pass is a warm-up
        out = model(ids, use_cache=True)
        past = out.past_key_values
        nxt = int(out.logits[0, -1].argmax())
        torch.cuda.synchronize()
        steps = []
        t_all = time.perf_counter()
        for _ in range(N):
            t0 = time.perf_counter()
            out = model(torch.tensor([[nxt]], device="cuda"), past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            nxt = int(out.logits[0, -1].argmax())  # the host needs the token: a sync
            steps.append(time.perf_counter() - t0)
        total = time.perf_counter() - t_all
    return {"decode_prompt": P, "decode_tokens": N, "decode_tok_s": N / total,
            "decode_step_ms_median": statistics.median(steps) * 1e3}


def bench_train(preset, B, T, steps, bf16=False, compile=False):
    model, cfg = model_of(preset)
    model.train()
    fwd = torch.compile(model) if compile else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    ids = torch.randint(0, cfg.vocab_size, (B, T + 1), device="cuda")
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(x).logits.view(-1, cfg.vocab_size)
            loss = torch.nn.functional.cross_entropy(logits.float(), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    ms = gpu_ms(step, 3, steps)
    peak = torch.cuda.max_memory_allocated() / 2**20
    return {"train_batch": B, "train_seq": T, "train_bf16": bf16, "train_compile": compile,
            "train_steps": steps, "train_step_ms": ms,
            "train_tok_s": B * T / ms * 1e3, "train_peak_gpu_mib": peak}


def bench_matmul(n):
    a = torch.rand(n, n, device="cuda") * 2 - 1
    b = torch.rand(n, n, device="cuda") * 2 - 1
    ms = gpu_ms(lambda: a @ b, 3, 10)
    return {"matmul_n": n, "matmul_ms": ms, "matmul_tflops": 2 * n**3 / ms * 1e-9}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=256)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--train-seq", type=int, default=1024)
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--matmul", type=int, default=4096)
    ap.add_argument("--tf32", action="store_true", help="matmuls on TF32 tensor cores")
    ap.add_argument("--bf16", action="store_true", help="train under bf16 autocast")
    ap.add_argument("--compile", action="store_true", help="train a torch.compile'd model")
    ap.add_argument("--graph-decode", action="store_true",
                    help="decode with each step one CUDA graph replay, fp32 and bf16 weights")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    out = {"preset": a.preset, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "tf32": a.tf32}
    if a.matmul > 0:
        out.update(bench_matmul(a.matmul))
    model, cfg = model_of(a.preset)
    model.eval()
    if a.prompt_tokens > 0:
        out.update(bench_prefill(model, cfg, a.prompt_tokens))
    if a.decode_tokens > 0:
        out.update(bench_decode(model, cfg, a.decode_prompt, a.decode_tokens))
    if a.graph_decode:
        out.update(bench_graph_decode(model, cfg, a.decode_prompt, a.decode_tokens,
                                      torch.float32))
        model.to(torch.bfloat16)
        out.update(bench_graph_decode(model, cfg, a.decode_prompt, a.decode_tokens,
                                      torch.bfloat16))
    del model
    torch.cuda.empty_cache()
    if a.train_steps > 0:
        out.update(bench_train(a.preset, a.train_batch, a.train_seq, a.train_steps, a.bf16,
                               a.compile))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
