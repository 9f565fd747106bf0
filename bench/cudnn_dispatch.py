# cuDNN SDPA B1 L8192 decode timed per call in blocks of 100, with its host dispatch alone: what sets its per-call time.
import time, torch, numpy as np
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
B, Hq, Hkv, L, D = 1, 32, 8, 8192, 128
q = torch.randn(B, Hq, 1, D, device="cuda", dtype=torch.half)
k = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.half)
v = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.half)
kvb = 2 * B * L * Hkv * D * 2
def per_call(fn, iters=100):
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    return np.median(ts) * 1e3, np.percentile(ts, 10) * 1e3, np.percentile(ts, 90) * 1e3
def host_us(fn, iters=100):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters): fn()
    t1 = time.perf_counter(); torch.cuda.synchronize()
    return (t1 - t0) / iters * 1e6
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    for _ in range(5): fn()
    for blk in range(8):
        med, p10, p90 = per_call(fn)
        print(f"block {blk}: per call median {med:.1f} us (p10 {p10:.1f}, p90 {p90:.1f}) = {kvb/med/1e3:.0f} GB/s; host dispatch {host_us(fn):.1f} us/call", flush=True)
        if blk == 3:
            time.sleep(0.5); print("  (slept 0.5 s)")
