#!/usr/bin/env python3
"""CPU attention: gllmd --backend cpu --threads N against PyTorch's CPU attention, N threads.

Starts a gllmd of the build tree on the CPU backend, times the shapes of the CPU tier's
targets through the gllm package (end to end per call, and the kernel time gllmd reports)
and PyTorch on the same inputs and thread count, and writes a gllm-bench-run/1 JSON
(bench/SCHEMA.md) with medians and the ratio torch / gllm (above 1: gllm is faster).
PyTorch 2 has scaled_dot_product_attention (GQA through enable_gqa where it exists, else
K and V expanded beforehand, outside the timing); PyTorch 1.13 has not, and is timed as its
matmul + softmax + matmul composition (GQA as query groups against one K/V head, no copies).

  bench/cpu_attention.py --threads 2 --out FILE
  GLLM_CPU_ISA=x86-64-v3 bench/cpu_attention.py ...   the kernel of one ISA level
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (name, B, Hq, Hkv, Sq, Skv, D, causal)
CASES = [
    ("prefill B1 Hq32 Hkv8 S1024 D128 causal", 1, 32, 8, 1024, 1024, 128, True),
    ("prefill B4 H16 S512 D64 causal", 4, 16, 16, 512, 512, 64, True),
    ("decode B16 Hq32 Hkv8 L2048 D128", 16, 32, 8, 1, 2048, 128, False),
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--iters", type=int, default=10, help="timed calls per case (median)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="build tree with gllmd and libgllm-client.so")
    p.add_argument("--out", default=None, help="JSON path (default: print only)")
    p.add_argument("--cases", default=None, help="comma-separated substrings of case names")
    p.add_argument("--no-torch", action="store_true", help="gllm only")
    return p.parse_args()


def commit():
    if os.environ.get("GLLM_COMMIT"):
        return os.environ["GLLM_COMMIT"]
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                           capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"]).returncode != 0
        return c + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def start_gllmd(build, threads, tmp):
    sock = os.path.join(tmp, "gllmd.sock")
    log = open(os.path.join(tmp, "gllmd.log"), "w+")
    proc = subprocess.Popen([os.path.join(build, "gllmd"), "--backend", "cpu", "--threads",
                             str(threads), "--socket", sock], stdout=log, stderr=log)
    for _ in range(200):
        if os.path.exists(sock):
            break
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if not os.path.exists(sock):
        log.seek(0)
        sys.exit("gllmd did not start: " + log.read())
    return proc, sock, log


def isa_line(log):
    """The line gllmd logs at start-up naming the kernel's ISA level."""
    log.flush()
    log.seek(0)
    for line in log:
        if "attention kernels for" in line:
            return line.split("attention kernels for", 1)[1].strip()
    return "unknown"


def median_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def torch_runner(torch, q, k, v, causal):
    """A callable that computes the attention in PyTorch, and what it is."""
    F = torch.nn.functional
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    if hasattr(F, "scaled_dot_product_attention"):
        try:
            F.scaled_dot_product_attention(q[:1, :Hq, :1], k[:1, :, :1], v[:1, :, :1],
                                           enable_gqa=True)
            return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                           enable_gqa=True),
                    "sdpa enable_gqa")
        except TypeError:
            ke = k.repeat_interleave(g, dim=1).contiguous()
            ve = v.repeat_interleave(g, dim=1).contiguous()
            return (lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal),
                    "sdpa, K/V expanded")
    scale = D ** -0.5
    qg = q.reshape(B, Hkv, g * Sq, D)
    kt = k.transpose(-1, -2)
    mask = None
    if causal:
        i = torch.arange(Sq).view(Sq, 1) + (Skv - Sq)
        j = torch.arange(Skv).view(1, Skv)
        mask = (j > i).view(1, 1, 1, Sq, Skv)

    def run():
        s = torch.matmul(qg, kt).mul_(scale)
        if mask is not None:
            s = s.view(B, Hkv, g, Sq, Skv).masked_fill_(mask, float("-inf")).view(
                B, Hkv, g * Sq, Skv)
        p = torch.softmax(s, dim=-1)
        return torch.matmul(p, v).view(B, Hq, Sq, D)
    return run, "matmul+softmax+matmul (no SDPA in this PyTorch)"


def main():
    args = parse_args()
    sys.path.insert(0, os.path.join(ROOT, "python"))
    os.environ.setdefault("GLLM_LIBRARY", os.path.join(args.build, "libgllm-client.so"))
    import numpy as np
    import gllm

    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(args.threads)
        except ImportError:
            print("torch not importable: gllm only", file=sys.stderr)
    cases = [c for c in CASES
             if not args.cases or any(s in c[0] for s in args.cases.split(","))]
    npdt = {"f32": np.float32, "f16": np.float16, "bf16": gllm.BF16}[args.dtype]
    es = 4 if args.dtype == "f32" else 2
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    load0 = os.getloadavg()

    tmp = tempfile.mkdtemp(prefix="gllm-cpu-bench-")
    proc, sock, log = start_gllmd(args.build, args.threads, tmp)
    results = []
    try:
        c = gllm.connect(sock)
        isa = isa_line(log)
        rng = np.random.default_rng(0)
        for name, B, Hq, Hkv, Sq, Skv, D, causal in cases:
            shapes = [(B, Hq, Sq, D), (B, Hkv, Skv, D), (B, Hkv, Skv, D), (B, Hq, Sq, D)]
            sizes = [int(np.prod(s)) * es for s in shapes]
            a = c.arena(sum(sizes) + 4096)
            views, off = [], 0
            for s, n in zip(shapes, sizes):
                views.append(a.numpy(npdt, s, offset=off))
                off += n
            q, k, v, out = views
            data = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes[:3]]
            for view, x in zip((q, k, v), data):
                view[...] = gllm.f32_to_bf16(x) if args.dtype == "bf16" else x.astype(npdt)
            kernel = []

            def call():
                kernel.append(c.attention(q, k, v, out, causal=causal).kernel_ns / 1e6)
            e2e, _ = median_ms(call, args.iters, args.warmup)
            kern = statistics.median(kernel[args.warmup:])
            fig = {"gllm_ms": [round(e2e, 3)], "gllm_kernel_ms": [round(kern, 3)]}
            row = {"suite": "cpu-attention", "name": f"{name} {args.dtype}",
                   "params": {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "seq_len": Sq,
                              "kv_len": Skv, "head_dim": D, "dtype": args.dtype,
                              "causal": causal},
                   "figures": fig, "gate": ["gllm_kernel_ms"]}
            if torch is not None:
                tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
                tq, tk, tv = (torch.from_numpy(x).to(tdt[args.dtype]) for x in data)
                run, how = torch_runner(torch, tq, tk, tv, causal)
                with torch.no_grad():
                    tms, _ = median_ms(run, args.iters, args.warmup)
                    want = run().float().numpy()
                got = (gllm.bf16_to_f32(out) if args.dtype == "bf16" else out).astype(np.float32)
                fig["torch_ms"] = [round(tms, 3)]
                fig["torch_over_gllm"] = [round(tms / e2e, 3)]
                row["params"]["torch_mode"] = how
                row["max_abs_diff_vs_torch"] = float(np.max(np.abs(got - want)))
            results.append(row)
            print(f"{row['name']:48s} gllm {e2e:8.2f} ms (kernel {kern:8.2f})"
                  + (f"  torch {fig['torch_ms'][0]:8.2f} ms  ratio {fig['torch_over_gllm'][0]:.2f}x"
                     f"  max|diff| {row['max_abs_diff_vs_torch']:.1e}" if "torch_ms" in fig else ""),
                  flush=True)
            del q, k, v, out, views
            a.release()
        caps, dev = c.caps, (c.devices[0].name if c.devices else "cpu")
        c.close()
    finally:
        proc.terminate()
        proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)

    doc = {"schema": "gllm-bench-run/1",
           "meta": {"date": started, "commit": commit(), "gllmd_version": caps.daemon_version,
                    "backend": caps.backend, "device": dev, "cpu": cpu_model(),
                    "cpus_online": os.cpu_count(), "threads": args.threads, "isa": isa,
                    "load_average_before": [round(x, 2) for x in load0],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    "peers": {"pytorch": torch.__version__} if torch is not None else {},
                    "command": " ".join(["bench/cpu_attention.py"] + sys.argv[1:]),
                    "tool": "cpu_attention.py", "iters": args.iters},
           "cases": results}
    print(f"isa: {isa}; load average {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
