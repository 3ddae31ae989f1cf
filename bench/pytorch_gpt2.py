#!/usr/bin/python3
"""PyTorch peer of `forge bench --preset`: GPT-2 inference speed with random weights.

Debian's PyTorch (torch 1.13, /usr/bin/python3), fp32, CPU. The model is written out by hand
(no transformers, no scaled_dot_product_attention in 1.13): prefill of a random prompt into a
preallocated KV cache, then a manual KV-cache decode loop feeding back the argmax, the same
work `forge bench --preset` times. Prints one JSON object.

  /usr/bin/python3 bench/pytorch_gpt2.py [--preset gpt2] [--prompt-tokens 128]
      [--decode-tokens 64] [--batch 1] [--threads 2]
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch

PRESETS = {  # n_layer, n_head, n_embd, n_ctx, vocab
    "gpt2": (12, 12, 768, 1024, 50257),
    "gpt2-medium": (24, 16, 1024, 1024, 50257),
    "gpt2-large": (36, 20, 1280, 1024, 50257),
    "gpt2-xl": (48, 25, 1600, 1024, 50257),
    "tiny": (2, 2, 64, 64, 256),
    "mini": (4, 4, 256, 256, 50257),
}


def gelu_new(x):
    # GPT-2's tanh approximation.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class GPT2:
    """Weights in HF's Conv1D layout ([in, out]); random GPT-2 init."""

    def __init__(self, L, H, C, P, V, gen):
        def normal(*shape, std=0.02):
            return torch.randn(*shape, generator=gen) * std

        self.L, self.H, self.C = L, H, C
        self.wte = normal(V, C)
        self.wpe = normal(P, C)
        proj_std = 0.02 / math.sqrt(2 * L)
        self.layers = []
        for _ in range(L):
            self.layers.append(dict(
                ln1_w=torch.ones(C), ln1_b=torch.zeros(C),
                attn_w=normal(C, 3 * C), attn_b=torch.zeros(3 * C),
                proj_w=normal(C, C, std=proj_std), proj_b=torch.zeros(C),
                ln2_w=torch.ones(C), ln2_b=torch.zeros(C),
                fc_w=normal(C, 4 * C), fc_b=torch.zeros(4 * C),
                fcp_w=normal(4 * C, C, std=proj_std), fcp_b=torch.zeros(C)))
        self.lnf_w, self.lnf_b = torch.ones(C), torch.zeros(C)

    def new_cache(self, B, cap):
        hd = self.C // self.H
        return [(torch.zeros(B, self.H, cap, hd), torch.zeros(B, self.H, cap, hd))
                for _ in range(self.L)]

    def forward(self, ids, cache, pos):
        """ids [B, T] at positions pos..pos+T-1; writes K/V into cache; logits of the last
        position [B, V]."""
        B, T = ids.shape
        C, H = self.C, self.H
        hd = C // H
        S = pos + T
        x = self.wte[ids] + self.wpe[pos:S]  # [B, T, C]
        # Causal mask for the new rows: row i sees columns <= pos + i.
        mask = None
        if T > 1:
            mask = torch.ones(T, S, dtype=torch.bool).triu(diagonal=pos + 1)
        for l, w in enumerate(self.layers):
            h = torch.nn.functional.layer_norm(x, (C,), w["ln1_w"], w["ln1_b"], 1e-5)
            qkv = torch.addmm(w["attn_b"], h.view(B * T, C), w["attn_w"]).view(B, T, 3, H, hd)
            q, k, v = qkv.unbind(2)  # [B, T, H, hd] each
            kc, vc = cache[l]
            kc[:, :, pos:S] = k.transpose(1, 2)
            vc[:, :, pos:S] = v.transpose(1, 2)
            att = torch.matmul(q.transpose(1, 2), kc[:, :, :S].transpose(-1, -2))
            att = att * (1.0 / math.sqrt(hd))  # [B, H, T, S]
            if mask is not None:
                att = att.masked_fill(mask, float("-inf"))
            att = torch.softmax(att, dim=-1)
            y = torch.matmul(att, vc[:, :, :S]).transpose(1, 2).reshape(B * T, C)
            x = x + torch.addmm(w["proj_b"], y, w["proj_w"]).view(B, T, C)
            h = torch.nn.functional.layer_norm(x, (C,), w["ln2_w"], w["ln2_b"], 1e-5)
            f = gelu_new(torch.addmm(w["fc_b"], h.view(B * T, C), w["fc_w"]))
            x = x + torch.addmm(w["fcp_b"], f, w["fcp_w"]).view(B, T, C)
        last = torch.nn.functional.layer_norm(x[:, -1], (C,), self.lnf_w, self.lnf_b, 1e-5)
        return last @ self.wte.t()  # [B, V]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    L, H, C, P, V = PRESETS[a.preset]
    if a.prompt_tokens < 1 or a.decode_tokens < 0 or a.batch < 1:
        ap.error("prompt tokens and batch must be >= 1, decode tokens >= 0")
    if a.prompt_tokens + a.decode_tokens > P:
        ap.error(f"prompt + decode tokens exceed the context ({P})")
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        t0 = time.perf_counter()
        model = GPT2(L, H, C, P, V, gen)
        init_s = time.perf_counter() - t0
        B, T, N = a.batch, a.prompt_tokens, a.decode_tokens
        ids = torch.randint(0, V, (B, T), generator=gen)
        cache = model.new_cache(B, T + N)
        prefill = []
        for r in range(4):  # one warm-up, then the median of 3, as forge does
            t0 = time.perf_counter()
            logits = model.forward(ids, cache, 0)
            if r > 0:
                prefill.append(time.perf_counter() - t0)
        prefill_s = statistics.median(prefill)
        steps = []
        t_dec = time.perf_counter()
        for i in range(N):
            t0 = time.perf_counter()
            nxt = logits.argmax(-1, keepdim=True)  # [B, 1]
            logits = model.forward(nxt, cache, T + i)
            steps.append(time.perf_counter() - t0)
        decode_s = time.perf_counter() - t_dec
    out = {
        "preset": a.preset,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": B,
        "prompt_tokens": T,
        "decode_tokens": N,
        "prefill_tok_s": B * T / prefill_s,
        "prefill_ms": prefill_s * 1e3,
        "decode_tok_s": B * N / decode_s if N > 0 else None,
        "decode_step_ms_median": statistics.median(steps) * 1e3 if N > 0 else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "init_s": init_s,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
