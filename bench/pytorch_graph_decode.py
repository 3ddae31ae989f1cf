"""Batch-1 greedy decode in PyTorch with the whole step captured as one CUDA graph: the peer
issue 20 names for forge's recorded decode step (bench/pytorch_cuda_gpt2.py --graph-decode).

The step is written here over the HF model's own modules (its LayerNorms, Conv1D products,
MLP and tied head), with a static KV cache [L, H, cap, hd] written at a position held in a
device tensor, attention over all cap rows with the rows past the position masked, and the
argmax written back as the next step's token on the device: nothing in the step depends on
the host, so torch.cuda.graph captures it once and every token is one replay. Like forge's
greedy loop, the host reads each token after its step (one sync per token).
"""
import math
import statistics
import time

import torch


class GraphDecoder:
    """Static buffers and one captured decode step of a GPT2LMHeadModel (eval mode)."""

    def __init__(self, model, cap, dtype):
        tr = model.transformer
        cfg = model.config
        self.model, self.cap = model, cap
        self.L, self.H, self.C = cfg.n_layer, cfg.n_head, cfg.n_embd
        self.hd = self.C // self.H
        dev = "cuda"
        self.k = torch.zeros(self.L, self.H, cap, self.hd, device=dev, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.tok = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.rows = torch.arange(cap, device=dev)
        self.tr = tr
        self.graph = None

    @torch.no_grad()
    def step(self):
        tr, H, C, hd = self.tr, self.H, self.C, self.hd
        x = tr.wte(self.tok) + tr.wpe(self.pos)  # [1, C]
        masked = (self.rows > self.pos).view(1, 1, self.cap)  # rows past the position
        for i, blk in enumerate(tr.h):
            qkv = blk.attn.c_attn(blk.ln_1(x))  # [1, 3C]
            q, k, v = qkv.split(C, dim=-1)
            self.k[i].index_copy_(1, self.pos, k.view(H, 1, hd))
            self.v[i].index_copy_(1, self.pos, v.view(H, 1, hd))
            att = (q.view(H, 1, hd) @ self.k[i].transpose(1, 2)) * (1.0 / math.sqrt(hd))
            att = torch.softmax(att.masked_fill(masked, float("-inf")), dim=-1)  # [H, 1, cap]
            y = (att @ self.v[i]).view(1, C)
            x = x + blk.attn.c_proj(y)
            x = x + blk.mlp(blk.ln_2(x))
        logits = self.model.lm_head(tr.ln_f(x))  # [1, V]
        self.tok.copy_(logits.argmax(dim=-1))
        self.pos.add_(1)
        return logits

    def capture(self):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as graph capture wants
            for _ in range(3):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.step()

    def reset(self, first_token):
        self.k.zero_()
        self.v.zero_()
        self.tok.fill_(first_token)
        self.pos.zero_()


@torch.no_grad()
def hf_greedy(model, prompt, n):
    """n greedy tokens of the HF model itself (its own KV cache), for the check below."""
    out = model(prompt.view(1, -1), use_cache=True)
    toks = [int(out.logits[0, -1].argmax())]
    for _ in range(n - 1):
        out = model(torch.tensor([[toks[-1]]], device="cuda"),
                    past_key_values=out.past_key_values, use_cache=True)
        toks.append(int(out.logits[0, -1].argmax()))
    return toks


@torch.no_grad()
def bench_graph_decode(model, cfg, P, N, dtype):
    """Tokens per second of N greedy steps after a P-token prompt (fed through the same
    step), and the median step. The prompt's tokens are fed one replay each. Also whether
    the first 8 tokens equal the HF model's own greedy ones (a check that the step is
    GPT-2's)."""
    dec = GraphDecoder(model, P + N + 4, dtype)
    dec.capture()
    prompt = torch.randint(0, cfg.vocab_size, (P,), device="cuda")
    want = hf_greedy(model, prompt, 8)
    dec.reset(int(prompt[0]))
    for i in range(P):
        dec.tok.fill_(int(prompt[i]))
        dec.graph.replay()
    got = [int(dec.tok.item())]
    for _ in range(7):
        dec.graph.replay()
        got.append(int(dec.tok.item()))
    for rep in range(2):  # the first pass is a warm-up
        dec.reset(int(prompt[0]))
        for i in range(P):
            dec.tok.fill_(int(prompt[i]))
            dec.graph.replay()
        torch.cuda.synchronize()
        steps = []
        t_all = time.perf_counter()
        for _ in range(N):
            t0 = time.perf_counter()
            dec.graph.replay()
            int(dec.tok.item())  # the host reads the token: a sync per step
            steps.append(time.perf_counter() - t0)
        total = time.perf_counter() - t_all
    name = "bf16" if dtype == torch.bfloat16 else "fp32"
    return {f"graph_decode_{name}_tok_s": N / total,
            f"graph_decode_{name}_step_ms_median": statistics.median(steps) * 1e3,
            f"graph_decode_{name}_first8_equal_hf": got == want}
