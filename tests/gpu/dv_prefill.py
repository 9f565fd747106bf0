#!/usr/bin/env python3
"""Dense prefill with V's head dim below Q's and K's (DeepSeek's Dqk 192 / Dv 128): gllmd's
output and lse against float64, then kernel speed against PyTorch SDPA's cuDNN and
efficient-attention kernels at the same dims, replayed from CUDA graphs.

Usage: dv_prefill.py --socket PATH [--shapes LIST] [--iters N] [--out DIR]
A shape is B:H:S:DQK:DV:DTYPE[:causal]. Tensors are torch CUDA tensors in gllmd-shared memory
(gllm's Python package); gllm is timed by its own kernel timer, runs back to back (repeat).
TFLOP/s count 2 (Dqk + Dv) flops per score entry the causal mask keeps. Writes
DIR/dv_prefill.json (gllm-bench-run/1). Exit 1 when a check fails; speed is reported, never
judged.
"""
import argparse
import datetime
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
sys.path.insert(0, HERE)
import benchrun  # noqa: E402
import gllm  # noqa: E402
from gpu_compare import time_torch_graph  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

DT = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 3e-3, "bf16": 2e-2}
SHAPES = "B2:H32:S4096:192:128:bf16:causal,B2:H32:S4096:192:128:bf16,B4:H16:S8192:192:128:bf16:causal," \
         "B2:H32:S4096:192:128:f16:causal"


def parse(text):
    t = text.split(":")
    return dict(B=int(t[0][1:]), H=int(t[1][1:]), S=int(t[2][1:]), Dqk=int(t[3]), Dv=int(t[4]),
                dtype=t[5], causal="causal" in t[6:])


def kept(S, causal):
    return S * (S + 1) // 2 if causal else S * S


def reference(q, k, v, causal):
    q, k, v = (x.double() for x in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def run_case(client, spec, iters, rows, results):
    B, H, S, Dqk, Dv, dt, causal = (spec[k] for k in ("B", "H", "S", "Dqk", "Dv", "dtype", "causal"))
    name = f"B{B} H{H} S{S} Dqk{Dqk} Dv{Dv} {dt}{' causal' if causal else ''}"
    g = torch.Generator(device="cuda").manual_seed(55)
    q, k = (client.torch_tensor((B, H, S, Dqk), DT[dt]) for _ in range(2))
    v, out = (client.torch_tensor((B, H, S, Dv), DT[dt]) for _ in range(2))
    lse = client.torch_tensor((B, H, S), torch.float32)
    for x in (q, k, v):
        x.copy_(torch.randn(x.shape, generator=g, device="cuda").to(x.dtype))
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    client.attention(q, k, v, out, causal=causal, lse=lse)
    torch.cuda.synchronize()
    heads = [0, H - 1]
    want, want_lse = reference(q[0, heads], k[0, heads], v[0, heads], causal)
    err = ((out[0, heads].double() - want).norm() / want.norm()).item()
    lerr = (lse[0, heads].double() - want_lse).abs().max().item()
    ok = bool(math.isfinite(err) and err < TOL[dt] and lerr < 2e-3)
    results.append({"shape": name, "rel_err": err, "lse_err": lerr, "ok": ok})
    print(f"{'ok  ' if ok else 'FAIL'} {name} (batch 0, heads 0,{H - 1}): rel err {err:.2e} "
          f"(tol {TOL[dt]:.0e}), lse err {lerr:.1e}", flush=True)
    if not ok:
        return
    flops = 2.0 * (Dqk + Dv) * kept(S, causal) * B * H
    ms = []
    for _ in range(iters):
        r = client.attention(q, k, v, out, causal=causal, repeat=10)
        ms.append(r.kernel_ns / 1e6)
    ours = sorted(ms)[len(ms) // 2]
    row = {"shape": name, "gllm_tflops": flops / ours / 1e9, "gllm_kernel_ms": ours}
    qt, kt, vt = (x.clone() for x in (q, k, v))
    for peer, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        def fn():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        try:
            got = fn()
            perr = ((got[0, heads].double() - want).norm() / want.norm()).item()
            peer_ms = time_torch_graph(fn, iters)
            row[f"{peer}_graph_tflops"] = flops / peer_ms / 1e9
            row[f"{peer}_rel_err"] = perr
        except RuntimeError as e:
            row[f"{peer}_error"] = str(e).splitlines()[0][:200]
    rows.append(row)
    extra = ", ".join(f"{p} {row[p + '_graph_tflops']:.0f} ({row['gllm_tflops'] / row[p + '_graph_tflops']:.2f}x)"
                      if p + "_graph_tflops" in row else f"{p} n/a ({row.get(p + '_error', '')})"
                      for p in ("cudnn", "efficient"))
    print(f"  {name}: gllm {row['gllm_tflops']:.0f} TFLOP/s ({ours:.3f} ms), {extra}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    client = gllm.connect(args.socket)
    client.ordered = False        # each call returns its JobResult (the kernel's time)
    rows, results = [], []
    for text in args.shapes.split(","):
        run_case(client, parse(text), args.iters, rows, results)
    passed = sum(r["ok"] for r in results)
    print(f"correctness: {passed} passed, {len(results) - passed} failed", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "commit": benchrun.commit(),
                "gllmd_version": client.caps.daemon_version, "backend": client.caps.backend,
                "device": torch.cuda.get_device_name(0),
                "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                "tool": "dv_prefill.py", "iters": args.iters, "peers": benchrun.torch_peers(torch)}
        meta.update(benchrun.nvidia_smi())
        cases = [benchrun.case("prefill-dv", r["shape"], {}, {k: v for k, v in r.items()
                                                             if k.endswith(("_tflops", "_ms"))},
                               ["gllm_tflops"]) for r in rows]
        with open(os.path.join(args.out, "dv_prefill.json"), "w") as f:
            json.dump({"schema": benchrun.SCHEMA, "meta": meta, "cases": cases,
                       "correctness": results, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0 if results and passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
