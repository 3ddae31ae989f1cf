#!/usr/bin/env python3
"""Writes tests/data/golden/<model>/: tiny random GPT-2 models made and run by HF transformers,
the fixtures that tests/test_gpt2.cpp compares forge against.

Run from the repository root on a machine with PyTorch + transformers (no internet needed):
  python3 tools/make_golden.py [--out tests/data/golden] [--device cpu|cuda]

Per model folder:
  config.json, model.safetensors   saved by save_pretrained (safetensors); forge loads them
  golden.json                      ids, losses, greedy continuations, versions, and where
                                   each logits block lives in golden.safetensors
  golden.safetensors               HF's float32 logits (exact, binary: 6-digit JSON would be
                                   2.5x larger for less precision)

Models (odd sizes on purpose; weights drawn with a fixed torch seed, then biases and LayerNorm
parameters randomized too, so that no term of the forward is trivially zero or one, and an
initializer_range that makes logits O(1) so that greedy argmaxes are not near-ties):
  odd          vocab 1003, 3 heads, n_embd 48, 2 layers, ctx 96, F32, "transformer." names
  f16_50257    GPT-2's vocab 50257, n_embd 32, 2 heads, 2 layers, ctx 128, saved as float16;
               its logits come from the float16-rounded weights run in float32; only the
               first 512 columns of every position plus the full last row of the prompt are
               stored (full rows would be 200 KB each)
  noprefix_bf16  vocab 257, 4 heads, n_embd 32, 1 layer, ctx 80, GPT2Model-style names
               (no "transformer."), saved as bfloat16
  untied       vocab 97, 2 heads, n_embd 16, 1 layer, ctx 80, its own lm_head.weight
               (tie_word_embeddings = false)

Artifacts (one function each, so later issues can add more, e.g. gradients):
  logits      prompt (B = 1, T = 8) and batch (B = 2, T = 8), every position
  loss        model(ids, labels=ids).loss for the prompt and the batch
  greedy      model.generate(do_sample=False, attention mask, eos disabled) of 64 new tokens
              from two prompts, each alone; with the smallest top-1/top-2 logit gap seen
              along the way (if it is tiny a float32 engine may legitimately differ)
The total stays under ~4 MB (the 50257 x 32 float16 embedding is 3.2 MB of it).

Gradients (--grads; tests/test_train.cpp's golden-gradient test), written instead of the
models above into <out>/train_grads*/:
  train_grads        vocab 1003, 3 heads, n_embd 48, 2 layers, ctx 32, tied
  train_grads_untied vocab 97, 2 heads, n_embd 16, 1 layer, ctx 32, own lm_head.weight
  Each: config.json + model.safetensors (F32 weights, made as above), then the model in
  float64 computes the mean next-token cross-entropy of a fixed batch (ids [2, 17]: inputs
  ids[:, :16], targets ids[:, 1:]) and its gradient w.r.t. every parameter.
  grads.safetensors  every parameter's float64 gradient rounded to F32, HF names without
                     "transformer." (the tied wte's holds both the embedding's and the LM
                     head's contributions)
  golden.json        ids, the float64 loss, versions
"""
import argparse
import json
import os
import shutil
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GREEDY_NEW = 64
PROMPT_T = 8
BATCH_T = 8

MODELS = [
    dict(name="odd", vocab=1003, heads=3, embd=48, layers=2, ctx=96, dtype="float32",
         prefix=True, tied=True, seed=1, cols=None),
    dict(name="f16_50257", vocab=50257, heads=2, embd=32, layers=2, ctx=128, dtype="float16",
         prefix=True, tied=True, seed=2, cols=512),
    dict(name="noprefix_bf16", vocab=257, heads=4, embd=32, layers=1, ctx=80, dtype="bfloat16",
         prefix=False, tied=True, seed=3, cols=None),
    dict(name="untied", vocab=97, heads=2, embd=16, layers=1, ctx=80, dtype="float32",
         prefix=True, tied=False, seed=4, cols=None),
]


# ------------------------------------------------------------------------------ the model

def make_model(spec):
    """A GPT2LMHeadModel with HF's own init (initializer_range 0.2, c_proj scaled by
    1/sqrt(2 L)), then biases ~ N(0, 0.1) and LayerNorm weights ~ 1 + N(0, 0.1)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(
        vocab_size=spec["vocab"], n_positions=spec["ctx"], n_embd=spec["embd"],
        n_layer=spec["layers"], n_head=spec["heads"], activation_function="gelu_new",
        layer_norm_epsilon=1e-5, initializer_range=0.2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=spec["vocab"] - 1, eos_token_id=spec["vocab"] - 1,
        tie_word_embeddings=spec["tied"])
    torch.manual_seed(spec["seed"])
    try:
        model = GPT2LMHeadModel(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        model = GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(1000 + spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif ".ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
    # The stored precision: round every weight to it, then compute in float32 from the
    # rounded values (what forge does after converting the file to F32).
    dtype = getattr(torch, spec["dtype"])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))
    return model.eval()


def save_model(model, spec, d):
    """save_pretrained in the stored dtype; then check (and if needed fix) the tensor names:
    "transformer.*" with a prefix, bare names without."""
    from safetensors.torch import load_file, save_file
    os.makedirs(d, exist_ok=True)
    dtype = getattr(torch, spec["dtype"])
    to_save = model if spec["prefix"] else model.transformer
    to_save = to_save.to(dtype)
    try:
        to_save.save_pretrained(d, safe_serialization=True)
    except TypeError:  # transformers versions where safetensors is the only format
        to_save.save_pretrained(d)
    model.to(torch.float32)
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    fixed = {}
    for name, t in tensors.items():
        bare = name[len("transformer."):] if name.startswith("transformer.") else name
        fixed[("transformer." + bare) if spec["prefix"] and bare != "lm_head.weight" else bare] = t
    if not spec["tied"] and "lm_head.weight" not in fixed:
        fixed["lm_head.weight"] = model.lm_head.weight.detach().to(dtype).contiguous()
    if set(fixed) != set(tensors):
        save_file(fixed, path, metadata={"format": "pt"})
    for extra in os.listdir(d):  # keep only what forge needs (generation_config.json etc.)
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, extra))
    return sorted(fixed)


# ------------------------------------------------------------------------------ artifacts

def fixed_ids(spec):
    """Prompt [1, PROMPT_T], batch [2, BATCH_T], and two greedy prompts: deterministic."""
    g = torch.Generator().manual_seed(500 + spec["seed"])
    v = spec["vocab"]
    return {
        "prompt": torch.randint(0, v, (1, PROMPT_T), generator=g),
        "batch": torch.randint(0, v, (2, BATCH_T), generator=g),
        "greedy_prompts": [torch.randint(0, v, (1, n), generator=g) for n in (5, 11)],
    }


def artifact_logits(model, ids, spec, device):
    """{name: float32 tensor} for golden.safetensors, and their description for golden.json."""
    tensors, desc = {}, {}
    with torch.no_grad():
        for key in ("prompt", "batch"):
            logits = model(ids[key].to(device)).logits.float().cpu()
            cols = spec["cols"]
            if cols is not None:
                tensors[key + "_logits"] = logits[..., :cols].contiguous()
                desc[key + "_logits"] = {"columns": [0, cols], "positions": "all"}
            else:
                tensors[key + "_logits"] = logits.contiguous()
                desc[key + "_logits"] = {"columns": "all", "positions": "all"}
        if spec["cols"] is not None:
            last = model(ids["prompt"].to(device)).logits[0, -1].float().cpu()
            tensors["prompt_last_row"] = last.contiguous()
            desc["prompt_last_row"] = {"columns": "all", "positions": [PROMPT_T - 1]}
    return tensors, desc


def artifact_loss(model, ids, device):
    out = {}
    with torch.no_grad():
        for key in ("prompt", "batch"):
            x = ids[key].to(device)
            out[key] = model(x, labels=x).loss.item()
    return out


def artifact_greedy(model, ids, spec, device):
    from transformers import GenerationConfig
    gen = GenerationConfig(do_sample=False, max_new_tokens=GREEDY_NEW, min_new_tokens=0,
                           eos_token_id=None, bos_token_id=None, pad_token_id=spec["vocab"] - 1,
                           num_beams=1, use_cache=True)
    runs = []
    for prompt in ids["greedy_prompts"]:
        x = prompt.to(device)
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), generation_config=gen)
            new = out[0, x.shape[1]:].cpu()
            assert new.numel() == GREEDY_NEW, f"generate stopped early: {new.numel()} tokens"
            # The smallest top-1/top-2 gap along the greedy path (full recompute).
            logits = model(out[:, :-1]).logits[0, x.shape[1] - 1:].float()
            top2 = logits.topk(2, dim=-1).values
            gap = (top2[:, 0] - top2[:, 1]).min().item()
            assert torch.equal(logits.argmax(-1).cpu(), new), "generate vs recompute differ"
        runs.append({"prompt": prompt[0].tolist(), "tokens": new.tolist(),
                     "min_top2_gap": gap})
    return runs


# ------------------------------------------------------------------------------ output

def write_golden(d, spec, names, ids, logits_desc, logits, loss, greedy):
    from safetensors.torch import save_file
    import transformers
    save_file(logits, os.path.join(d, "golden.safetensors"), metadata={"format": "pt"})
    golden = {
        "model": spec["name"],
        "made_by": {"transformers": transformers.__version__, "torch": torch.__version__,
                    "script": "tools/make_golden.py"},
        "stored_dtype": spec["dtype"],
        "prefix": spec["prefix"],
        "tied": spec["tied"],
        "tensors": names,
        "prompt_ids": ids["prompt"].tolist(),
        "batch_ids": ids["batch"].tolist(),
        "logits": logits_desc,
        "loss": loss,
        "greedy": greedy,
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


def make_one(spec, out_root, device):
    d = os.path.join(out_root, spec["name"])
    shutil.rmtree(d, ignore_errors=True)
    model = make_model(spec)
    names = save_model(model, spec, d)
    model.to(device)
    ids = fixed_ids(spec)
    logits, desc = artifact_logits(model, ids, spec, device)
    loss = artifact_loss(model, ids, device)
    greedy = artifact_greedy(model, ids, spec, device)
    write_golden(d, spec, names, ids, desc, logits, loss, greedy)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    gaps = ", ".join(f"{g['min_top2_gap']:.2e}" for g in greedy)
    print(f"{spec['name']:14s} {size / 1e6:6.2f} MB  loss prompt {loss['prompt']:.5f} "
          f"batch {loss['batch']:.5f}  greedy min top-2 gaps {gaps}  tensors {len(names)}")
    return size


# ------------------------------------------------------------------------------ gradients

GRAD_MODELS = [
    dict(name="train_grads", vocab=1003, heads=3, embd=48, layers=2, ctx=32, dtype="float32",
         prefix=True, tied=True, seed=11, cols=None),
    dict(name="train_grads_untied", vocab=97, heads=2, embd=16, layers=1, ctx=32,
         dtype="float32", prefix=False, tied=False, seed=12, cols=None),
]
GRAD_B, GRAD_T = 2, 16


def make_grads(spec, out_root, device):
    """Saves the F32 model, then its float64 loss and gradients on one fixed batch."""
    from safetensors.torch import save_file
    import torch.nn.functional as F
    import transformers
    d = os.path.join(out_root, spec["name"])
    shutil.rmtree(d, ignore_errors=True)
    model = make_model(spec)
    save_model(model, spec, d)
    model = model.to(device=device, dtype=torch.float64)
    model.eval()  # dropout p = 0 anyway; eval() makes that explicit
    g = torch.Generator().manual_seed(700 + spec["seed"])
    ids = torch.randint(0, spec["vocab"], (GRAD_B, GRAD_T + 1), generator=g)
    inputs, targets = ids[:, :-1].to(device), ids[:, 1:].to(device)
    model.zero_grad(set_to_none=True)
    logits = model(inputs).logits  # [B, T, V] float64
    loss = F.cross_entropy(logits.reshape(-1, spec["vocab"]), targets.reshape(-1))
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        bare = name[len("transformer."):] if name.startswith("transformer.") else name
        grads[bare] = p.grad.detach().to(torch.float32).cpu().contiguous()
    if not spec["tied"]:
        assert "lm_head.weight" in grads, "untied model without its own lm_head gradient"
    save_file(grads, os.path.join(d, "grads.safetensors"), metadata={"format": "pt"})
    golden = {
        "model": spec["name"],
        "made_by": {"transformers": transformers.__version__, "torch": torch.__version__,
                    "script": "tools/make_golden.py --grads", "device": str(device)},
        "ids": ids.tolist(),
        "loss": loss.item(),
        "grads": sorted(grads),
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{spec['name']:20s} {size / 1e6:6.2f} MB  loss {loss.item():.10f}  "
          f"params {len(grads)}")
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "golden"))
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--grads", action="store_true",
                    help="write the train_grads* folders (gradients) instead of the models")
    args = ap.parse_args()
    # Full float32 everywhere (no TF32), deterministic kernels.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.makedirs(args.out, exist_ok=True)
    if args.grads:
        total = sum(make_grads(spec, args.out, args.device) for spec in GRAD_MODELS)
        print(f"total {total / 1e6:.2f} MB in {args.out}")
        return
    total = sum(make_one(spec, args.out, args.device) for spec in MODELS)
    print(f"total {total / 1e6:.2f} MB in {args.out}")
    if total > 4.5e6:
        sys.exit("golden files exceed the size budget")


if __name__ == "__main__":
    main()
