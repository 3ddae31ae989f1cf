# The LM head's three products at 16 x 1024 rows through PyTorch (cuBLAS) on CUDA, with the
# vocabulary's 50257 columns (fp32 rows not 16-byte aligned) and padded to 50260 and 50304,
# TF32 and exact fp32: ms per product, mean of 10 after 3 warm-ups. docs/PERFORMANCE.md,
# session 35. Run on the GPU machine: python3 bench/pytorch_lm_head_alignment.py
import time, torch
for tf32 in (True, False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for V in (50257, 50260, 50304):
        dl = torch.randn(16384, V, device="cuda"); w = torch.randn(V, 768, device="cuda")
        h = torch.randn(16384, 768, device="cuda")
        res = []
        for name, f in (("fwd h@w^T", lambda: h @ w.t()), ("dX dl@w", lambda: dl @ w),
                        ("dW dl^T@h", lambda: dl.t() @ h)):
            for _ in range(3): f()
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(10): f()
            torch.cuda.synchronize(); res.append("%s %.2f ms" % (name, (time.perf_counter() - t) / 10 * 1e3))
        print("tf32" if tf32 else "fp32", V, " | ".join(res), flush=True)
        del dl, w, h
