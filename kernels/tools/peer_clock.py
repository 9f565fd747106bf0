#!/usr/bin/env python3
"""Peers outside gllmd for kernels/tools/hp_trace.cu's clock figures, on the GPU machine:
cuDNN SDPA at D = 128 and a 16-bit 8192^3 matrix product. Each is timed as gpu_compare.py
times a peer (calls replayed from a CUDA graph), once briefly and once for about half a
second while nvidia-smi reads the SM clock; the tensor cores' use is the sustained rate over
that clock (4096 dense 16-bit flop per SM per cycle)."""
import os
import statistics
import sys
import threading

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "gpu"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import benchrun  # noqa: E402
from gpu_compare import GRAPH_REPS, time_torch_graph  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def measure(name, fn, flop):
    ms = time_torch_graph(fn, 3 * GRAPH_REPS)
    clocks, done = [], threading.Event()

    def sample():
        while not done.is_set():
            mhz = benchrun.nvidia_smi().get("sm_clock_mhz")
            if mhz:
                clocks.append(mhz)

    sampler = threading.Thread(target=sample)
    sampler.start()
    ms_sustained = time_torch_graph(fn, max(3 * GRAPH_REPS, int(600 / ms)))
    done.set()
    sampler.join()
    tflops = flop / ms * 1e-9
    line = f"{name}: {ms * 1e3:.1f} us {tflops:.0f} TFLOP/s; sustained {ms_sustained * 1e3:.1f} us"
    if clocks:
        mhz = statistics.median(clocks)
        use = flop / (ms_sustained * 1e-3) / (mhz * 1e6 * SMS * 4096)
        line += f" at {mhz:.0f} MHz (nvidia-smi), tensor {use * 100:.1f}%"
    print(line, flush=True)


def main():
    torch.manual_seed(0)
    for B, H, S, causal in ((8, 16, 2048, False), (4, 16, 4096, False), (2, 16, 8192, False),
                            (32, 16, 512, True)):
        for dt in (torch.float16, torch.bfloat16):
            q, k, v = (torch.randn(B, H, S, 128, device="cuda", dtype=dt) for _ in range(3))
            flop = 4 * B * H * S * S * 128 * (0.5 if causal else 1)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                measure(f"cudnn B{B} H{H} S{S} D128 {str(dt)[6:]}{' causal' if causal else ''}",
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), flop)
    for dt in (torch.bfloat16, torch.float16):
        a, b = (torch.randn(8192, 8192, device="cuda", dtype=dt) for _ in range(2))
        measure(f"matrix product {str(dt)[6:]} 8192^3", lambda: a @ b, 2 * 8192 ** 3)


if __name__ == "__main__":
    main()
