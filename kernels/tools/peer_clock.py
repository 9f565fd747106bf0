# Peers outside gllmd for kernels/tools/hp_trace.cu's clock figures: cuDNN SDPA (D = 128) and a
# 16-bit 8192^3 matrix product, each timed as 20 calls replayed from a CUDA graph, then replayed
# for about half a second while nvidia-smi reads the SM clock and power (run on the GPU machine).
import subprocess, statistics, sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

def smi():
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.strip().split(",")
    return float(out[0]), float(out[1])

def measure(name, fn, flop):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(20):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); g.replay(); e1.record(); e1.synchronize()
    us = e0.elapsed_time(e1) * 1000 / 20
    n = max(1, int(0.6e6 / (us * 20)))
    for _ in range(n):
        g.replay()
    samples = []
    for _ in range(4):
        samples.append(smi())
    torch.cuda.synchronize()
    e0.record(); g.replay(); e1.record(); e1.synchronize()
    us2 = e0.elapsed_time(e1) * 1000 / 20
    mhz = statistics.median(x[0] for x in samples); w = statistics.median(x[1] for x in samples)
    tf = flop / us * 1e-6; tf2 = flop / us2 * 1e-6
    print(f"{name}: {us:.1f} us {tf:.0f} TFLOP/s (after sustained {us2:.1f} us {tf2:.0f}); "
          f"sustained {mhz:.0f} MHz {w:.0f} W, tensor {tf2 * 1e12 / (mhz * 1e6 * 132 * 4096) * 100:.1f}%", flush=True)

torch.manual_seed(0)
for (B, H, S, causal) in [(8, 16, 2048, False), (4, 16, 4096, False), (2, 16, 8192, False), (32, 16, 512, True)]:
    for dt in (torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(B, H, S, 128, device="cuda", dtype=dt) for _ in range(3))
        flop = 4 * B * H * S * S * 128 * (0.5 if causal else 1)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            measure(f"cudnn B{B} H{H} S{S} D128 {str(dt)[6:]}{' causal' if causal else ''}",
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), flop)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
measure("gemm bf16 8192^3", lambda: a @ b, 2 * 8192 ** 3)
a = a.half(); b = b.half()
measure("gemm f16 8192^3", lambda: a @ b, 2 * 8192 ** 3)
