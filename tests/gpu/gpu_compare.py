#!/usr/bin/env python3
"""GPU check: gllmd's outputs against PyTorch SDPA in float64, then speed against SDPA's
FLASH_ATTENTION (FA2) and CUDNN_ATTENTION backends in the same run.

Usage: gpu_compare.py --socket PATH [--out DIR] [--iters N] [--sweep] [--sustained SECONDS]
Prints one line per case and a summary table last; writes DIR/gpu_compare.json, a
gllm-bench-run/1 document (bench/SCHEMA.md) with the correctness cases beside it.
GLLM_BENCH_SLOWDOWN=F (a test hook of the regression gate) reports gllm's times as (1 + F)
times what was measured; the peers' are left alone.
"""
import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:   # a CPU PyTorch before 2.2: dense_variants.py --smoke takes only the helpers
    SDPBackend = sdpa_kernel = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import benchrun  # noqa: E402
from gllm_raw import Arena, Client, GllmError  # noqa: E402
import prefill_shapes  # noqa: E402
from prefill_shapes import shape_name  # noqa: E402

TOL = {"f16": 3e-3, "bf16": 2e-2, "f32": 1e-5}
LSE_TOL = 2e-3     # absolute, natural log: float32 sums of the rounded inputs' exponentials
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def to_numpy_bits(t, dtype):
    t = t.contiguous().cpu()
    if dtype == "bf16":
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def from_numpy_bits(a, dtype):
    if dtype == "bf16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def reference(q, k, v, causal, scale):
    """float64 attention with GQA and the bottom-right causal mask spelled out, and each row's
    log-sum-exp of its scaled scores (natural log), head by head to bound the memory. A row
    with no visible key: zeros and -inf, as gllm defines them."""
    g = q.shape[1] // k.shape[1]
    sq, skv = q.shape[2], k.shape[2]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float64, device=q.device)
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(skv, device=q.device)[None, :]
        mask = j <= i + (skv - sq)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h].to(torch.float64) @ k[b, h // g].to(torch.float64).T) * scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            lse[b, h] = torch.logsumexp(s, dim=-1)
            p = torch.nan_to_num(torch.exp(s - lse[b, h][:, None]), nan=0.0)   # empty rows
            out[b, h] = p @ v[b, h // g].to(torch.float64)
    return out, lse


class Job:
    """q, k, v, out (and lse) of one shape in one arena."""

    def __init__(self, client, B, Hq, Hkv, Sq, Skv, D, dtype):
        self.shape_q, self.shape_k = (B, Hq, Sq, D), (B, Hkv, Skv, D)
        self.dtype = dtype
        es = np.dtype(np.float32 if dtype == "f32" else np.float16).itemsize
        nq, nk = B * Hq * Sq * D, B * Hkv * Skv * D
        self.off = [0, nq * es, (nq + nk) * es, (nq + 2 * nk) * es, (2 * nq + 2 * nk) * es]
        size = self.off[4] + B * Hq * Sq * 4 + 4096
        self.arena = Arena(client, size)
        self.views = [self.arena.view(self.off[0], dtype, self.shape_q),
                      self.arena.view(self.off[1], dtype, self.shape_k),
                      self.arena.view(self.off[2], dtype, self.shape_k),
                      self.arena.view(self.off[3], dtype, self.shape_q)]
        self.lse = self.arena.view(self.off[4], "f32", (B, Hq, Sq))
        self.params = {n: Client.tensor(self.arena, o, dtype, s) for n, o, s in
                       zip("qkv", self.off, (self.shape_q, self.shape_k, self.shape_k))}
        self.params["out"] = Client.tensor(self.arena, self.off[3], dtype, self.shape_q)
        self.params["lse"] = Client.tensor(self.arena, self.off[4], "f32", (B, Hq, Sq))

    def fill(self, q, k, v):
        for view, t in zip(self.views, (q, k, v)):
            view[...] = to_numpy_bits(t, self.dtype)

    def poison(self):
        self.views[3].view(np.uint8)[...] = 0xFF   # NaN in every float format
        self.lse[...] = np.nan

    def output(self):
        return from_numpy_bits(self.views[3], self.dtype)

    def release(self):
        self.arena.release()


def check(client, rng, results, B, Hq, Hkv, Sq, Skv, D, dtype, causal, scale=None,
          kv_bcast=False, ramp=0.0):
    """kv_bcast: K and V given with a head stride of 0 (every KV head the same rows), a
    layout the Hopper kernels' TMA producer cannot take: their cp.async producer runs.
    ramp: every query's column 0 is 1 and key j's is j * ramp / 128, so each 128-key tile's
    scores pass the last one's by about ramp / sqrt(D): the Hopper D = 128 kernel's
    speculative softmax misses (past 8 in log2 units) and, past 128, its exp2 overflows."""
    job = Job(client, B, Hq, Hkv, Sq, Skv, D, dtype)
    q = torch.randn(B, Hq, Sq, D, generator=rng)
    kv_heads = 1 if kv_bcast else Hkv
    k = torch.randn(B, kv_heads, Skv, D, generator=rng)
    if ramp:
        q[..., 0] = 1.0
        k[..., 0] = torch.arange(Skv, dtype=torch.float32) * ramp / 128
    q = q.to(TORCH[dtype])
    k = k.to(TORCH[dtype]).expand(B, Hkv, Skv, D)
    v = torch.randn(B, kv_heads, Skv, D, generator=rng).to(TORCH[dtype]).expand(B, Hkv, Skv, D)
    job.fill(q, k, v)
    job.poison()
    params = dict(job.params, causal=causal)
    if kv_bcast:
        for n in "kv":
            params[n] = dict(params[n], strides=[Hkv * Skv * D, 0, D, 1])
    if scale is None:
        scale = 1 / math.sqrt(D)
    else:
        params["scale"] = scale
    name = f"B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Skv{Skv} D{D} {dtype}{' causal' if causal else ''}"
    if "scale" in params:
        name += f" scale {scale}"
    if kv_bcast:
        name += " kv heads broadcast"
    if ramp:
        name += f" ramp {ramp:g}"
    try:
        client.call("attention", params)
    except GllmError as e:
        # A failed job (a kernel past the watchdog, say: gllmd resets the device and serves
        # on) fails its case; the cases after it still run.
        print(f"FAIL {name}: {e}", flush=True)
        results.append({"case": name, "error": str(e), "ok": False})
        job.release()
        return False
    got = job.output().to(torch.float64)
    want, want_lse = (t.cpu() for t in reference(q.cuda(), k.cuda(), v.cuda(), causal, scale))
    written = not torch.isnan(got).any().item()
    err = ((got - want).abs().max() / want.abs().max()).item() if written else float("inf")
    # lse: the same rows' log-sum-exp, -inf where no key is visible (the same in both).
    got_lse = torch.from_numpy(job.lse.copy()).to(torch.float64)
    finite = torch.isfinite(want_lse)
    lse_err = float("inf")
    if not torch.isnan(got_lse).any().item() and torch.equal(finite, torch.isfinite(got_lse)):
        lse_err = ((got_lse - want_lse)[finite].abs().max().item() if finite.any().item() else 0.0)
        if not torch.equal(got_lse[~finite], want_lse[~finite]):
            lse_err = float("inf")
    ok = written and err <= TOL[dtype] and lse_err <= LSE_TOL
    print(f"{'ok  ' if ok else 'FAIL'} {name}: rel err {err:.2e} (tol {TOL[dtype]:.0e}), "
          f"lse err {lse_err:.1e} (tol {LSE_TOL:.0e}){'' if written else ' UNWRITTEN OUTPUT'}",
          flush=True)
    results.append({"case": name, "rel_err": err, "lse_err": lse_err, "ok": ok})
    job.release()
    return ok


def time_torch(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


GRAPH_REPS = 20      # calls per CUDA graph of a peer, and gllm's runs per back-to-back job
SUSTAIN_REPEAT = 100  # gllm's runs per job under a sustained load (the protocol's most)
SUSTAIN_BATCH_MS = 10  # a peer's replays between two events under a sustained load


def graph_of(fn):
    """fn captured in a CUDA graph (after a warm-up call), for replays without the host."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fn()
    torch.cuda.synchronize()
    return graph


def replay_ms(graph, n):
    """Milliseconds per replay of n replays back to back between two events."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        graph.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def graph_ms(graph, iters, reps=GRAPH_REPS):
    """Milliseconds per call with the host out of the way: the median of reps replays back to
    back between two events. time_torch's per-call events include the host's dispatch of each
    call, which on a 20 us kernel is most of what they measure."""
    return float(np.median([replay_ms(graph, reps) for _ in range(max(3, iters // reps))]))


def time_torch_graph(fn, iters, reps=GRAPH_REPS):
    """graph_ms of fn captured in a CUDA graph."""
    return graph_ms(graph_of(fn), iters, reps)


def sustained(batch, seconds):
    """Milliseconds per call under a sustained load, a value per batch: batch() runs a batch of
    calls back to back and returns its time per call; batches follow each other for the given
    seconds (at least four), and the second half's values are returned, once the clock has
    settled. A burst of 20 calls after an idle GPU runs at its boost clock, which a serving load
    does not keep (an H100 fell from about 1.75 to 1.45-1.65 GHz within a second)."""
    end, per = time.perf_counter() + seconds, []
    while time.perf_counter() < end or len(per) < 4:
        per.append(batch())
    return per[len(per) // 2:]


def check_heads(job, q, k, v, causal, heads):
    """gllm's output of batch 0's given query heads against float64 (a sweep's long shapes
    have no room for the whole float64 score matrix); the relative error."""
    g = q.shape[1] // k.shape[1]
    kv = [h // g for h in heads]
    want, _ = reference(q[:1, heads].cuda(), k[:1, kv].cuda(), v[:1, kv].cuda(), causal,
                        1 / math.sqrt(q.shape[-1]))
    want = want.cpu()
    got = job.output()[:1, heads].to(torch.float64)
    if torch.isnan(got).any().item():
        return float("inf")
    return ((got - want).abs().max() / want.abs().max()).item()


def bench(client, B, H, S, D, dtype, causal, iters, rows, Hkv=None, results=None, sustain=0.0):
    """results: also check the output (batch 0, first and last head) in float64 first.
    sustain: also time gllm and cuDNN under a sustained load of that many seconds each, twice,
    alternated (sustained())."""
    Hkv = Hkv or H
    job = Job(client, B, H, Hkv, S, S, D, dtype)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, S, D, generator=g).to(TORCH[dtype])
    k, v = (torch.randn(B, Hkv, S, D, generator=g).to(TORCH[dtype]) for _ in range(2))
    job.fill(q, k, v)
    params = dict(job.params, causal=causal)
    del params["lse"]
    name = shape_name(B, H, Hkv, S, D, dtype, causal)
    if results is not None:
        job.poison()
        client.call("attention", params)
        err = check_heads(job, q, k, v, causal, [0, H - 1])
        ok = err <= TOL[dtype]
        print(f"{'ok  ' if ok else 'FAIL'} {name} (batch 0, heads 0 and {H - 1}): rel err "
              f"{err:.2e} (tol {TOL[dtype]:.0e})", flush=True)
        results.append({"case": name + prefill_shapes.CHECKED, "rel_err": err, "ok": ok})
    kern, e2e, copy_bw = [], [], []
    slow = 1 + benchrun.slowdown()     # the test hook: 1 unless GLLM_BENCH_SLOWDOWN is set
    client.call("attention", params)   # warm-up
    for _ in range(iters):
        t0 = time.perf_counter()
        r = client.call("attention", params)
        e2e.append((time.perf_counter() - t0) * 1e3 * slow)
        kern.append(r["kernel_ns"] / 1e6 * slow)
        if r.get("copy_ns"):
            copy_bw.append(r["copy_bytes"] / (r["copy_ns"] * slow))
    # gllm timed as the graph-replayed peers are: GRAPH_REPS runs back to back in one job
    # (repeat), each launched while the one before runs, so that the launch and the idle GPU's
    # start are one GRAPH_REPS-th of the time rather than part of every run.
    b2b = []
    for _ in range(max(3, iters // 2)):
        r = client.call("attention", dict(params, repeat=GRAPH_REPS))
        b2b.append(r["kernel_ns"] / 1e6 * slow)
    flops = 4 * B * H * S * S * D / (2 if causal else 1)
    qd, kd, vd = q.cuda(), k.cuda(), v.cuda()
    peers, graphed, graphs = {}, {}, {}
    for peer, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        peers[peer] = graphed[peer] = float("nan")
        # GQA: the peer's own grouped path where it has one, else K and V expanded to every
        # query head (the same arithmetic; more memory traffic, which prefill hides)
        calls = [lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal,  # noqa: E731
                                                        enable_gqa=Hkv != H)]
        if Hkv != H:
            ke, ve = (x.repeat_interleave(H // Hkv, dim=1) for x in (kd, vd))
            calls.append(lambda: F.scaled_dot_product_attention(qd, ke, ve, is_causal=causal))  # noqa: E731
        for fn in calls:
            try:
                with sdpa_kernel(backend):
                    peers[peer] = time_torch(fn, iters)
                    graphs[peer] = graph_of(fn)
                    graphed[peer] = graph_ms(graphs[peer], iters)
                break
            except RuntimeError as e:
                print(f"  {peer} unavailable: {e}".splitlines()[0])
    ours, ours_b2b = float(np.median(kern)), float(np.median(b2b))
    # Sustained (sustain > 0): gllm's jobs of SUSTAIN_REPEAT runs and cuDNN's graph replays in
    # turn, each for `sustain` seconds, twice, so that neither has the cooler GPU throughout.
    ours_steady = cudnn_steady = float("nan")
    if sustain > 0 and "cudnn" in graphs:
        def gllm_batch():
            r = client.call("attention", dict(params, repeat=SUSTAIN_REPEAT))
            return r["kernel_ns"] / 1e6 * slow          # kernel_ns: one run's mean
        n = max(1, round(SUSTAIN_BATCH_MS / graphed["cudnn"]))
        g_ms, c_ms = [], []
        for _ in range(2):
            g_ms += sustained(gllm_batch, sustain)
            c_ms += sustained(lambda: replay_ms(graphs["cudnn"], n), sustain)
        ours_steady, cudnn_steady = float(np.median(g_ms)), float(np.median(c_ms))
    row = {
        "shape": name,
        "gllm_ms": ours, "gllm_tflops": flops / ours / 1e9, "e2e_ms": float(np.median(e2e)),
        "gllm_b2b_ms": ours_b2b, "gllm_b2b_tflops": flops / ours_b2b / 1e9,
        "fa2_tflops": flops / peers["fa2"] / 1e9, "cudnn_tflops": flops / peers["cudnn"] / 1e9,
        "copy_gbps": float(np.median(copy_bw)) if copy_bw else float("nan"),
    }
    row["vs_fa2"] = row["gllm_tflops"] / row["fa2_tflops"]
    row["vs_cudnn"] = row["gllm_tflops"] / row["cudnn_tflops"]
    # The peers again without PyTorch's per-call dispatch in their time (CUDA graph).
    row["fa2_graph_tflops"] = flops / graphed["fa2"] / 1e9
    row["cudnn_graph_tflops"] = flops / graphed["cudnn"] / 1e9
    row["vs_fa2_graph"] = row["gllm_tflops"] / row["fa2_graph_tflops"]
    row["vs_cudnn_graph"] = row["gllm_tflops"] / row["cudnn_graph_tflops"]
    # Kernel against kernel: both back to back.
    row["vs_fa2_b2b"] = row["gllm_b2b_tflops"] / row["fa2_graph_tflops"]
    row["vs_cudnn_b2b"] = row["gllm_b2b_tflops"] / row["cudnn_graph_tflops"]
    # Both under a sustained load (nan when not asked for).
    row["gllm_sustained_tflops"] = flops / ours_steady / 1e9
    row["cudnn_sustained_tflops"] = flops / cudnn_steady / 1e9
    row["vs_cudnn_sustained"] = row["gllm_sustained_tflops"] / row["cudnn_sustained_tflops"]
    row["case"] = benchrun.case(
        "prefill", row["shape"],
        {"batch": B, "heads": H, "kv_heads": Hkv, "seq_len": S, "head_dim": D, "dtype": dtype,
         "causal": causal},
        {"gllm_tflops": row["gllm_tflops"], "gllm_kernel_ms": ours, "gllm_e2e_ms": row["e2e_ms"],
         "gllm_back_to_back_tflops": row["gllm_b2b_tflops"],
         "gllm_arena_copy_gbps": row["copy_gbps"],
         "fa2_per_call_tflops": row["fa2_tflops"], "cudnn_per_call_tflops": row["cudnn_tflops"],
         "fa2_graph_tflops": row["fa2_graph_tflops"], "cudnn_graph_tflops": row["cudnn_graph_tflops"],
         "gllm_sustained_tflops": row["gllm_sustained_tflops"],
         "cudnn_sustained_tflops": row["cudnn_sustained_tflops"]},
        ["gllm_tflops"])
    rows.append(row)
    job.release()
    print(f"  {row['shape']}: gllm {row['gllm_tflops']:.0f} TFLOP/s ({ours:.3f} ms; back to back "
          f"{row['gllm_b2b_tflops']:.0f}, {ours_b2b:.3f} ms), "
          f"FA2 {row['fa2_tflops']:.0f}, cuDNN {row['cudnn_tflops']:.0f} (from a CUDA graph: "
          f"FA2 {row['fa2_graph_tflops']:.0f}, cuDNN {row['cudnn_graph_tflops']:.0f}), "
          f"e2e {row['e2e_ms']:.2f} ms, arena copies {row['copy_gbps']:.1f} GB/s"
          + (f"; sustained: gllm {row['gllm_sustained_tflops']:.0f}, cuDNN "
             f"{row['cudnn_sustained_tflops']:.0f} ({row['vs_cudnn_sustained']:.2f}x)"
             if math.isfinite(row["vs_cudnn_sustained"]) else ""), flush=True)


def pinned_h2d_gbps(iters=10):
    n = 256 << 20
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    ms = time_torch(lambda: dst.copy_(src, non_blocking=True), iters)
    return n / ms / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--match", default=None,
                    help="bench only the shapes whose name this regular expression finds")
    ap.add_argument("--no-cases", action="store_true",
                    help="skip the fixed float64 cases (a sweep still checks each of its shapes)")
    ap.add_argument("--sweep", action="store_true",
                    help="FlashAttention-3's sweep in place of the four bench shapes: 16k tokens "
                    "(B = 16384 / S), hidden 2048 (H = 2048 / D), S 512 to 16k, D 64 and 128, "
                    "causal and not, f16 and bf16, and GQA 4:1 and 8:1; each shape checked "
                    "in float64 (batch 0, first and last head) before it is timed")
    ap.add_argument("--shapes", default=None, metavar="B:H:S:D:DTYPE[:causal][:kvN],...",
                    help="these bench shapes in place of the four standard ones (kvN: N KV heads)")
    ap.add_argument("--sustained", type=float, default=0.0, metavar="SECONDS",
                    help="also time gllm and cuDNN under a sustained load, each for SECONDS "
                    "twice in turn (0.2 to 10; the xcuDNNs column): the GPU's clock after a "
                    "second of work, not its boost after an idle moment")
    args = ap.parse_args()
    if args.sustained and not 0.2 <= args.sustained <= 10:
        ap.error("--sustained: want 0.2 to 10 seconds")
    os.makedirs(args.out, exist_ok=True)   # now, not after a long run that then cannot write
    client = Client(args.socket)
    dev = client.caps["devices"][0]
    print(f"gllmd {client.caps['daemon']} backend {client.caps['backend']}: {dev['name']} "
          f"cc {dev.get('compute_capability')} image {dev.get('image')}", flush=True)
    rng = torch.Generator().manual_seed(int(time.time()))
    results = []
    cases = [
        (1, 8, 8, 256, 256, 128, "f16", False), (1, 8, 8, 256, 256, 128, "f16", True),
        (2, 8, 2, 200, 333, 128, "bf16", True), (2, 4, 4, 127, 127, 64, "f16", True),
        (1, 16, 2, 64, 1000, 64, "bf16", False), (1, 8, 1, 300, 100, 128, "f16", True),
        (3, 4, 4, 1, 513, 128, "bf16", False), (1, 4, 2, 77, 77, 96, "f16", True),
        (1, 4, 4, 100, 130, 64, "f32", True), (2, 8, 4, 512, 512, 64, "bf16", True),
        (1, 4, 4, 100, 100, 64, "f16", True, -0.3), (1, 4, 2, 70, 90, 128, "bf16", True, 0.0),
        # wide score range: the running max keeps growing across tiles
        (1, 4, 4, 600, 600, 128, "f16", False, 1.0), (1, 4, 2, 300, 900, 64, "bf16", True, 2.0),
        # the Hopper kernel (D = 128): GQA, ragged tails, one key, a negative scale, causal
        # over several row blocks with Skv > Sq and Skv < Sq
        (2, 8, 2, 200, 333, 128, "bf16", False), (1, 8, 8, 129, 1, 128, "f16", False),
        (1, 4, 4, 1000, 77, 128, "bf16", False, -0.5), (1, 16, 4, 257, 1024, 128, "f16", False),
        (1, 4, 2, 700, 1100, 128, "f16", True), (1, 4, 4, 1000, 300, 128, "bf16", True),
        # the same for D = 64 (192-row blocks: a last block whose spare warpgroups sit idle)
        (2, 8, 2, 200, 333, 64, "bf16", False), (1, 4, 4, 1000, 77, 64, "f16", False, -0.5),
        (1, 4, 2, 700, 1100, 64, "f16", True), (1, 4, 4, 1000, 300, 64, "bf16", True),
        # the Hopper kernels' cp.async producer (a head stride of 0, which TMA cannot take)
        (2, 8, 4, 300, 500, 128, "f16", True, None, True),
        (1, 8, 2, 700, 400, 64, "bf16", False, None, True),
        # the persistent kernel (v20): more tiles than SMs, so each block runs several and
        # reuses its Q buffer and stage ring across them: ragged rows, causal with Sq > Skv
        # (tiles without keys among paired ones) and Sq < Skv, GQA, both producers
        (3, 16, 16, 1500, 1500, 128, "f16", False), (2, 32, 8, 1999, 1999, 64, "bf16", False),
        (4, 32, 8, 1000, 300, 128, "bf16", True), (4, 32, 8, 777, 1500, 64, "f16", True),
        (4, 32, 4, 1000, 1200, 128, "f16", True, None, True),
        (4, 32, 4, 900, 700, 64, "bf16", False, None, True),
        # D = 128 not causal with the last rounds split by keys (v34; more tiles than blocks,
        # not a multiple): GQA, a ragged key tail inside a split part, ragged rows, wide scores
        (3, 40, 8, 1000, 4100, 128, "f16", False), (2, 36, 4, 1100, 5000, 128, "bf16", False),
        (5, 28, 28, 700, 4500, 128, "f16", False, 1.0),
        # scores that grow key tile after key tile (v57's misses; at 1200 exp2 overflows when
        # a tile is taken against the last maximum), in whole and split walks, and falling
        (1, 8, 8, 1024, 1024, 128, "f16", False, None, False, 160.0),
        (2, 8, 2, 700, 2000, 128, "bf16", False, None, False, 1200.0),
        (3, 40, 8, 1000, 4100, 128, "f16", False, None, False, 40.0),
        # overflowing where 132 SMs split its units (272 of 16 key tiles: 8 in the last round)
        # and the last row block's warps disagree (rows past Sq have no scores to overflow;
        # a miss path that needed the whole warpgroup hung here, v59c)
        (1, 34, 17, 1000, 2048, 128, "bf16", False, None, False, 1200.0),
        # overflowing at the walk's last key tile (two, the second ragged), ragged rows, both
        # producers
        (2, 8, 2, 300, 200, 128, "bf16", False, None, False, 1200.0),
        (1, 4, 4, 130, 250, 128, "f16", False, None, True, 1200.0),
        (1, 8, 8, 600, 1500, 128, "f16", False, None, False, -160.0),
        (2, 8, 2, 500, 1500, 128, "bf16", False, None, True, 160.0),   # the cp.async kernel
        # D = 256 (its Hopper kernel of 64-key tiles), and 192 and 160 padded onto it: GQA,
        # ragged tails, one key, causal with Skv < Sq, a head stride of 0, growing scores
        (2, 8, 2, 200, 333, 256, "bf16", False), (1, 8, 8, 129, 1, 256, "f16", False),
        (1, 4, 4, 1000, 300, 256, "f16", True), (1, 4, 2, 700, 1100, 256, "bf16", True, -0.5),
        (2, 8, 4, 300, 500, 256, "f16", True, None, True),
        (1, 8, 8, 1024, 1024, 256, "f16", False, None, False, 160.0),
        (1, 4, 2, 300, 300, 192, "bf16", True), (1, 4, 4, 257, 400, 160, "f16", False),
    ]
    for _ in range(6):   # fresh random shapes every run
        r = [int(x) for x in torch.randint(1, 700, (2,), generator=rng)]
        pick = [int(x) for x in torch.randint(0, 2, (4,), generator=rng)]
        cases.append((1 + pick[0], 8, 2, r[0], r[1], (64, 128)[pick[1]], ("f16", "bf16")[pick[2]],
                      bool(pick[3])))
    if args.skip_check:
        cases = cases[:2]
    if args.no_cases:
        cases = []
    passed = sum(check(client, rng, results, *c) for c in cases)
    print(f"correctness: {passed} passed, {len(cases) - passed} failed", flush=True)

    rows = []
    h2d = float("nan")
    if not args.skip_bench:
        h2d = pinned_h2d_gbps()
        print(f"PyTorch pinned host-to-device copy: {h2d:.1f} GB/s", flush=True)
        shapes = [(s, None) for s in prefill_shapes.STANDARD]
        if args.sweep:
            shapes = prefill_shapes.sweep()
        if args.shapes:
            shapes = []
            for spec in args.shapes.split(","):
                B, H, S, D, dt, *rest = spec.split(":")
                hkv = next((int(x[2:]) for x in rest if x.startswith("kv")), None)
                shapes.append(((int(B), int(H), int(S), int(D), dt, "causal" in rest), hkv))
        for shape, hkv in shapes:
            B, H, S, D, dt, c = shape
            if args.match and not re.search(args.match, shape_name(B, H, hkv or H, S, D, dt, c)):
                continue
            bench(client, *shape, args.iters, rows, Hkv=hkv,
                  results=results if args.sweep and not args.skip_check else None,
                  sustain=args.sustained)
        swept = results[len(cases):]
        if swept:
            print(f"sweep correctness: {sum(r['ok'] for r in swept)} passed, "
                  f"{sum(not r['ok'] for r in swept)} failed", flush=True)
    bench_cases = [r["case"] for r in rows]
    for c in bench_cases:
        if math.isfinite(h2d):
            c["figures"]["torch_pinned_h2d_gbps"] = [round(h2d, 2)]
    meta = benchrun.meta("gpu_compare.py", client.caps, [os.path.basename(sys.argv[0])] + sys.argv[1:],
                         args.iters, benchrun.torch_peers(torch))
    with open(os.path.join(args.out, "gpu_compare.json"), "w") as f:
        json.dump({"schema": benchrun.SCHEMA, "meta": meta, "cases": bench_cases, "device_info": dev,
                   "correctness": results}, f, indent=1)
        f.write("\n")
    if rows:
        print(f"\n{'shape':34} {'gllm':>7} {'FA2':>7} {'cuDNN':>7} {'xFA2':>6} {'xcuDNN':>7} "
              f"{'copy/pinned':>11} {'FA2g':>6} {'xFA2g':>6} {'cuDNNg':>7} {'xcuDNNg':>8} "
              f"{'gllmb':>6} {'xcuDNNb':>8}" + (f" {'xcuDNNs':>8}" if args.sustained else "") +
              "  (g: peer replayed from a CUDA graph; b: gllm's runs back to back, against cuDNNg"
              + ("; s: both sustained" if args.sustained else "") + ")")
        for r in rows:
            print(f"{r['shape']:34} {r['gllm_tflops']:7.0f} {r['fa2_tflops']:7.0f} "
                  f"{r['cudnn_tflops']:7.0f} {r['vs_fa2']:6.2f} {r['vs_cudnn']:7.2f} "
                  f"{r['copy_gbps'] / h2d:11.2f} {r['fa2_graph_tflops']:6.0f} {r['vs_fa2_graph']:6.2f}"
                  f" {r['cudnn_graph_tflops']:7.0f} {r['vs_cudnn_graph']:8.2f}"
                  f" {r['gllm_b2b_tflops']:6.0f} {r['vs_cudnn_b2b']:8.2f}"
                  + (f" {r['vs_cudnn_sustained']:8.2f}" if args.sustained else ""))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
