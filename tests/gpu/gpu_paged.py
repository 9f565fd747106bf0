#!/usr/bin/env python3
"""Paged KV cache on the GPU machine: gllmd's decode and prefill vs PyTorch float64 on random page
tables, then decode bandwidth against PyTorch SDPA (cuDNN, FA2) and a device-to-device copy, in one run.

Usage: gpu_paged.py --socket PATH [--out DIR] [--iters N] [--shapes B:L[:D[:HQ:HKV]],...]
Writes DIR/gpu_paged.json, a gllm-bench-run/1 document (bench/SCHEMA.md) with the
correctness cases beside it. GLLM_BENCH_SLOWDOWN=F (a test hook of the regression gate)
reports gllm's kernel times as (1 + F) times what was measured; the peers' are left alone.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import benchrun  # noqa: E402
from gllm_raw import Arena, Client, GllmError  # noqa: E402
from gpu_compare import time_torch, time_torch_graph  # noqa: E402

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 3e-3, "bf16": 2e-2}


def bits(t):
    """A torch f16/bf16 tensor as the raw 16-bit numpy array the arena holds."""
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


class Paged:
    """Pools in device tensors, everything else in one arena."""

    def __init__(self, client, P, ps, Hkv, D, dtype, extra_bytes, device=0):
        self.c, self.P, self.ps, self.Hkv, self.D, self.dtype = client, P, ps, Hkv, D, dtype
        self.device = device
        self.pool_bytes = P * ps * Hkv * D * 2
        self.arena = Arena(client, self.pool_bytes + extra_bytes + (1 << 20))
        self.used = self.pool_bytes    # the pool's staging copy sits at offset 0
        self.kc = client.call("dtensor_create", {"bytes": self.pool_bytes, "device": device})["dtensor"]
        self.vc = client.call("dtensor_create", {"bytes": self.pool_bytes, "device": device})["dtensor"]
        self.qo = None
        self.extra = []

    def take(self, n):
        at = (self.used + 255) & ~255
        self.used = at + n
        assert self.used <= self.arena.size
        return at

    def upload_pool(self, dt_id, t, staging=0):
        """t into device tensor dt_id, staged at arena offset staging (the pool's at 0)."""
        b = bits(t).reshape(-1)
        self.arena.map[staging:staging + b.nbytes] = b.tobytes()
        step = 1 << 30
        for at in range(0, b.nbytes, step):
            n = min(step, b.nbytes - at)
            self.c.call("dtensor_copy", {"dtensor": dt_id, "offset": at, "arena": self.arena.id,
                                          "arena_offset": staging + at, "bytes": n,
                                          "to_device": True})

    def i32(self, values):
        a = np.asarray(values, dtype=np.int32)
        at = self.take(max(a.nbytes, 4))
        self.arena.map[at:at + a.nbytes] = a.tobytes()
        return {"arena": self.arena.id, "offset": at, "dtype": "i32", "shape": [len(a)]}

    def i32_device(self, values):
        """values in a device tensor of their own, by way of the arena."""
        t = self.i32(values)
        n = max(4 * len(values), 4)
        dt = self.c.call("dtensor_create", {"bytes": n, "device": self.device})["dtensor"]
        self.extra.append(dt)
        self.c.call("dtensor_copy", {"dtensor": dt, "offset": 0, "arena": self.arena.id,
                                     "arena_offset": t["offset"], "bytes": n, "to_device": True})
        return {"dtensor": dt, "offset": 0, "dtype": "i32", "shape": [len(values)]}

    def pools(self):
        shape = [self.P, self.ps, self.Hkv, self.D]
        return ({"dtensor": self.kc, "offset": 0, "dtype": self.dtype, "shape": shape},
                {"dtensor": self.vc, "offset": 0, "dtype": self.dtype, "shape": shape})

    def free(self):
        for t in [self.kc, self.vc] + self.extra:
            self.c.call("dtensor_free", {"dtensor": t})
        if self.qo is not None:
            self.c.call("dtensor_free", {"dtensor": self.qo})
        self.c.call("arena_release", {"arena": self.arena.id})


def make_tables(lens, ps, P, g):
    """Each sequence gets its pages from a random permutation of the pool."""
    perm = torch.randperm(P, generator=g).tolist()
    indptr, indices, last, at = [0], [], [], 0
    for n in lens:
        np_ = (n + ps - 1) // ps
        indices += perm[at:at + np_]
        at += np_
        indptr.append(len(indices))
        last.append(n - (np_ - 1) * ps if np_ else 0)
    return indptr, indices, last


def gather(pool, indices, indptr, b, n):
    """Sequence b's first n tokens as dense [n, Hkv, D]."""
    pages = pool[torch.tensor(indices[indptr[b]:indptr[b + 1]], dtype=torch.long)]
    return pages.reshape(-1, pool.shape[2], pool.shape[3])[:n]


def check(client, g, B, Hq, Hkv, D, ps, dtype, prefill, dev_pages, results, device=0,
          max_len=900, min_len=1, scale=None, bad_page=False):
    lens = [int(x) for x in torch.randint(min_len, max_len, (B,), generator=g)]
    qlens = [int(torch.randint(1, n + 1, (1,), generator=g)) if prefill else 1 for n in lens]
    P = sum((n + ps - 1) // ps for n in lens) + 5
    N = sum(qlens)
    pg = Paged(client, P, ps, Hkv, D, dtype, 4 * N * Hq * D * 2 + 16 * (P + 4 * B), device)
    kpool = torch.randn(P, ps, Hkv, D, generator=g).to(TORCH[dtype])
    vpool = torch.randn(P, ps, Hkv, D, generator=g).to(TORCH[dtype])
    indptr, indices, last = make_tables(lens, ps, P, g)
    # Slots no sequence owns hold NaN (past each sequence's last token, and the spare pages):
    # a kernel that lets one into a score or a P V poisons the output.
    owned = torch.zeros(P, ps, dtype=torch.bool)
    for b in range(B):
        pages = indices[indptr[b]:indptr[b + 1]]
        for i, pgn in enumerate(pages):
            owned[pgn, :(last[b] if i == len(pages) - 1 else ps)] = True
    kpool[~owned] = float("nan")
    vpool[~owned] = float("nan")
    pg.upload_pool(pg.kc, kpool)
    pg.upload_pool(pg.vc, vpool)
    q = torch.randn(N, Hq, D, generator=g).to(TORCH[dtype])
    qb = bits(q)
    oq, oo = pg.take(qb.nbytes), pg.take(qb.nbytes)
    pg.arena.map[oq:oq + qb.nbytes] = qb.tobytes()
    pg.arena.map[oo:oo + qb.nbytes] = b"\xff" * qb.nbytes      # poisoned: NaN
    kc, vc = pg.pools()
    params = {"k_cache": kc, "v_cache": vc, "kv_indptr": pg.i32(indptr),
              "kv_indices": pg.i32_device(indices) if dev_pages else pg.i32(indices),
              "kv_last_page_len": pg.i32(last),
              "q": Client.tensor(pg.arena, oq, dtype, [N, Hq, D]),
              "out": Client.tensor(pg.arena, oo, dtype, [N, Hq, D])}
    if prefill:
        params["qo_indptr"] = pg.i32(np.concatenate([[0], np.cumsum(qlens)]))
    params["device"] = device
    if scale is not None:
        params["scale"] = scale
    method = "attention_prefill" if prefill else "attention_decode"
    bad_ok = True
    if bad_page:
        # A page number past the pool in the device's table, in the middle of the longest
        # sequence: the job fails with BOUNDS naming the entry (nothing read through it, no
        # hang), and the same job with the table repaired runs right afterwards.
        assert dev_pages
        b = max(range(B), key=lambda i: lens[i])
        at = (indptr[b] + indptr[b + 1]) // 2
        for value in (P, indices[at]):
            fixed = list(indices)
            fixed[at] = value
            staged = pg.i32(fixed)
            client.call("dtensor_copy", {"dtensor": params["kv_indices"]["dtensor"], "offset": 0,
                                         "arena": pg.arena.id, "arena_offset": staged["offset"],
                                         "bytes": 4 * len(fixed), "to_device": True})
            if value == P:
                try:
                    client.call(method, params)
                    bad_ok = False
                    print(f"  FAIL a page number past the pool in kv_indices[{at}] ran", flush=True)
                except GllmError as e:
                    bad_ok = e.code == -1011 and f"kv_indices[{at}]" in str(e)   # BOUNDS
                    print(f"  {'ok  ' if bad_ok else 'FAIL'} kv_indices[{at}] past the pool: {e}",
                          flush=True)
        pg.arena.map[oo:oo + qb.nbytes] = b"\xff" * qb.nbytes
    client.call(method, params)
    raw = np.frombuffer(pg.arena.map, dtype=np.int16, count=N * Hq * D, offset=oo).copy()
    got = torch.from_numpy(raw).view(TORCH[dtype]).reshape(N, Hq, D).double().cuda()
    want = torch.empty(N, Hq, D, dtype=torch.float64, device="cuda")
    kd, vd = kpool.double().cuda(), vpool.double().cuda()
    qd, row = q.double().cuda(), 0
    for b in range(B):
        n, m = lens[b], qlens[b]
        k = gather(kd, indices, indptr, b, n).permute(1, 0, 2).unsqueeze(0)
        v = gather(vd, indices, indptr, b, n).permute(1, 0, 2).unsqueeze(0)
        k, v = k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)
        qq = qd[row:row + m].permute(1, 0, 2).unsqueeze(0)
        # query i sits at position n - m + i and sees keys 0 .. n - m + i
        mask = torch.arange(n, device="cuda")[None, :] <= (n - m + torch.arange(m, device="cuda"))[:, None]
        want[row:row + m] = F.scaled_dot_product_attention(qq, k, v, attn_mask=mask,
                                                           scale=scale)[0].permute(1, 0, 2)
        row += m
    err = float((got - want).abs().max() / want.abs().max())
    ok = err <= TOL[dtype] and bad_ok
    name = (f"{'prefill' if prefill else 'decode'} B{B} Hq{Hq} Hkv{Hkv} D{D} page {ps} {dtype} "
            f"{f'device {device} ' if device else ''}"
            f"(lens {min(lens)}..{max(lens)}){' pages on device' if dev_pages else ''}"
            f"{f' scale {scale}' if scale is not None else ''}"
            f"{', a bad page first' if bad_page else ''}")
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: rel err {err:.2e}", flush=True)
    results.append({"case": name, "rel_err": err, "ok": ok})
    pg.free()
    return ok


def repeat_check(client, g, runs, expect):
    """One long B1 decode (split, the single entry point) run `runs` times on the same data:
    how many different outputs came back. expect: gllmd runs with deterministic = on, so
    anything but one is a failure."""
    Hq, Hkv, D, ps, L = 32, 8, 128, 16, int(torch.randint(4000, 6000, (1,), generator=g))
    P = (L + ps - 1) // ps + 5
    pg = Paged(client, P, ps, Hkv, D, "f16", 4 * Hq * D * 2 + 16 * (P + 4))
    pg.upload_pool(pg.kc, torch.randn(P, ps, Hkv, D, generator=g).half())
    pg.upload_pool(pg.vc, torch.randn(P, ps, Hkv, D, generator=g).half())
    indptr, indices, last = make_tables([L], ps, P, g)
    qb = bits(torch.randn(1, Hq, D, generator=g).half())
    oq, oo = pg.take(qb.nbytes), pg.take(qb.nbytes)
    pg.arena.map[oq:oq + qb.nbytes] = qb.tobytes()
    kc, vc = pg.pools()
    params = {"k_cache": kc, "v_cache": vc, "kv_indptr": pg.i32(indptr),
              "kv_indices": pg.i32_device(indices), "kv_last_page_len": pg.i32(last),
              "q": Client.tensor(pg.arena, oq, "f16", [1, Hq, D]),
              "out": Client.tensor(pg.arena, oo, "f16", [1, Hq, D])}
    seen = set()
    for _ in range(runs):
        pg.arena.map[oo:oo + qb.nbytes] = b"\xff" * qb.nbytes      # poisoned: NaN
        client.call("attention_decode", params)
        seen.add(bytes(pg.arena.map[oo:oo + qb.nbytes]))
    pg.free()
    ok = len(seen) == 1 or not expect
    print(f"  {'ok  ' if ok else 'FAIL'} B1 L{L} decode run {runs} times: {len(seen)} different "
          f"output{'s' if len(seen) != 1 else ''}"
          f"{' (gllmd deterministic = on)' if expect else ' (informational: deterministic = off)'}",
          flush=True)
    return ok


def d2d_gbps(iters):
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = time_torch(lambda: y.copy_(x), iters)
    return 2 * x.numel() / ms / 1e6     # bytes read + written


def bench(client, g, B, Hq, Hkv, L, D, ps, iters, rows, d2d):
    dtype = "f16"
    P = B * ((L + ps - 1) // ps)
    pg = Paged(client, P, ps, Hkv, D, dtype, 16 * (P + 4 * B) + (1 << 20))
    kpool = torch.randn(P, ps, Hkv, D, generator=g).half()
    vpool = torch.randn(P, ps, Hkv, D, generator=g).half()
    pg.upload_pool(pg.kc, kpool)
    pg.upload_pool(pg.vc, vpool)
    indptr, indices, last = make_tables([L] * B, ps, P, g)
    q = torch.randn(B, Hq, D, generator=g).half()
    qbytes = B * Hq * D * 2
    pg.qo = client.call("dtensor_create", {"bytes": 2 * qbytes})["dtensor"]
    at = pg.take(qbytes)
    pg.arena.map[at:at + qbytes] = bits(q).tobytes()
    client.call("dtensor_copy", {"dtensor": pg.qo, "offset": 0, "arena": pg.arena.id,
                                  "arena_offset": at, "bytes": qbytes, "to_device": True})
    kc, vc = pg.pools()
    params = {"k_cache": kc, "v_cache": vc, "kv_indptr": pg.i32(indptr),
              "kv_indices": pg.i32_device(indices), "kv_last_page_len": pg.i32(last),
              "q": {"dtensor": pg.qo, "offset": 0, "dtype": dtype, "shape": [B, Hq, D]},
              "out": {"dtensor": pg.qo, "offset": qbytes, "dtype": dtype, "shape": [B, Hq, D]}}
    for _ in range(3):
        client.call("attention_decode", params)
    slow = 1 + benchrun.slowdown()     # the test hook: 1 unless GLLM_BENCH_SLOWDOWN is set
    kern = [client.call("attention_decode", params)["kernel_ns"] / 1e6 * slow for _ in range(iters)]
    ours = float(np.median(kern))
    # The output of the timed shape against float32 torch on the same data.
    client.call("dtensor_copy", {"dtensor": pg.qo, "offset": qbytes, "arena": pg.arena.id,
                                  "arena_offset": at, "bytes": qbytes, "to_device": False})
    got = torch.from_numpy(np.frombuffer(pg.arena.map, dtype=np.int16, count=B * Hq * D, offset=at).copy())
    got = got.view(torch.float16).reshape(B, Hq, D).float().cuda()

    dense_k = torch.stack([gather(kpool.cuda(), indices, indptr, b, L) for b in range(B)]).permute(0, 2, 1, 3).contiguous()
    dense_v = torch.stack([gather(vpool.cuda(), indices, indptr, b, L) for b in range(B)]).permute(0, 2, 1, 3).contiguous()
    qd = q.cuda().unsqueeze(2)                                   # [B, Hq, 1, D]
    want = F.scaled_dot_product_attention(qd.float(), dense_k.float(), dense_v.float(),
                                          enable_gqa=True)[:, :, 0]
    err = float((got - want).abs().max() / want.abs().max())
    kv_bytes = 2 * B * L * Hkv * D * 2
    peers, modes, graphed = {}, {}, {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        peers[name], modes[name], graphed[name] = float("nan"), "unavailable", float("nan")
        for mode in ("gqa", "expanded"):
            try:
                if mode == "gqa":
                    fn = lambda: F.scaled_dot_product_attention(qd, dense_k, dense_v, enable_gqa=True)  # noqa: E731
                else:
                    ke = dense_k.repeat_interleave(Hq // Hkv, 1)
                    ve = dense_v.repeat_interleave(Hq // Hkv, 1)
                    fn = lambda: F.scaled_dot_product_attention(qd, ke, ve)  # noqa: E731
                with sdpa_kernel(backend):
                    peers[name] = time_torch(fn, iters)
                    try:
                        graphed[name] = time_torch_graph(fn, iters)
                    except RuntimeError as e:
                        print(f"  {name} ({mode}) in a CUDA graph: {str(e).splitlines()[0][:120]}",
                              flush=True)
                modes[name] = mode
                break
            except RuntimeError as e:
                print(f"  {name} ({mode}) unavailable: {str(e).splitlines()[0][:120]}", flush=True)
    row = {"shape": f"decode B{B} Hq{Hq} Hkv{Hkv} L{L} D{D} f16 page {ps}", "gllm_ms": ours,
           "gllm_gbps": kv_bytes / ours / 1e6, "rel_err_vs_f32": err,
           "cudnn_gbps": kv_bytes / peers["cudnn"] / 1e6, "cudnn_mode": modes["cudnn"],
           "fa2_gbps": kv_bytes / peers["fa2"] / 1e6, "fa2_mode": modes["fa2"], "d2d_gbps": d2d,
           "cudnn_graph_gbps": kv_bytes / graphed["cudnn"] / 1e6,
           "fa2_graph_gbps": kv_bytes / graphed["fa2"] / 1e6}
    row["vs_cudnn"] = row["gllm_gbps"] / row["cudnn_gbps"]
    row["vs_cudnn_graph"] = row["gllm_gbps"] / row["cudnn_graph_gbps"]
    row["vs_d2d"] = row["gllm_gbps"] / d2d
    row["case"] = benchrun.case(
        "paged-decode", row["shape"][len("decode "):],
        {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "kv_len": L, "head_dim": D, "dtype": dtype,
         "page_size": ps},
        {"gllm_gbps": row["gllm_gbps"], "gllm_kernel_us": ours * 1e3,
         "cudnn_per_call_gbps": row["cudnn_gbps"], "fa2_per_call_gbps": row["fa2_gbps"],
         "cudnn_graph_gbps": row["cudnn_graph_gbps"], "fa2_graph_gbps": row["fa2_graph_gbps"],
         "torch_d2d_gbps": d2d},
        ["gllm_gbps"])
    row["case"]["params"].update(cudnn_mode=modes["cudnn"], fa2_mode=modes["fa2"])
    rows.append(row)
    print(f"  {row['shape']}: gllm {row['gllm_gbps']:.0f} GB/s ({ours * 1e3:.1f} us, err {err:.1e}), "
          f"cuDNN {row['cudnn_gbps']:.0f} ({modes['cudnn']}), FA2 {row['fa2_gbps']:.0f} ({modes['fa2']}), "
          f"x cuDNN {row['vs_cudnn']:.2f}, of D2D {row['vs_d2d']:.2f}; peers from a CUDA graph "
          f"(no host dispatch): cuDNN {row['cudnn_graph_gbps']:.0f}, FA2 {row['fa2_graph_gbps']:.0f}, "
          f"x cuDNN {row['vs_cudnn_graph']:.2f}", flush=True)
    del dense_k, dense_v
    pg.free()


def bench_variant(client, g, B, Hq, Hkv, L, D, ps, window, iters, rows):
    """Decode with a left window and sinks (GPT-OSS's local layers) against the plain decode
    of the same cache, in the same call: the window's keys are all a query reads, so its
    time should fall toward window / L of the plain one's. Checked against float32 torch."""
    dtype = "f16"
    P = B * ((L + ps - 1) // ps)
    pg = Paged(client, P, ps, Hkv, D, dtype, 16 * (P + 4 * B) + (1 << 20))
    kpool = torch.randn(P, ps, Hkv, D, generator=g).half()
    vpool = torch.randn(P, ps, Hkv, D, generator=g).half()
    pg.upload_pool(pg.kc, kpool)
    pg.upload_pool(pg.vc, vpool)
    indptr, indices, last = make_tables([L] * B, ps, P, g)
    q = torch.randn(B, Hq, D, generator=g).half()
    sinks = (torch.rand(Hq, generator=g) * 4 - 2).float()
    qbytes = B * Hq * D * 2
    at = pg.take(qbytes)
    pg.arena.map[at:at + qbytes] = bits(q).tobytes()
    sat = pg.take(Hq * 4)
    pg.arena.map[sat:sat + Hq * 4] = sinks.numpy().tobytes()
    oat = pg.take(qbytes)
    kc, vc = pg.pools()
    plain = {"k_cache": kc, "v_cache": vc, "kv_indptr": pg.i32(indptr),
             "kv_indices": pg.i32_device(indices), "kv_last_page_len": pg.i32(last),
             "q": Client.tensor(pg.arena, at, dtype, [B, Hq, D]),
             "out": Client.tensor(pg.arena, oat, dtype, [B, Hq, D])}
    var = dict(plain, window_left=window, window_right=-1,
               sinks=Client.tensor(pg.arena, sat, "f32", [Hq]))
    for _ in range(3):
        client.call("attention_decode", plain)
        client.call("attention_decode", var)
    tp, tv = [], []
    for _ in range(iters):        # alternated, so both see the same clocks
        tp.append(client.call("attention_decode", plain)["kernel_ns"] / 1e6)
        tv.append(client.call("attention_decode", var)["kernel_ns"] / 1e6)
    ours_p, ours_v = float(np.median(tp)), float(np.median(tv))
    client.call("attention_decode", var)
    got = torch.from_numpy(np.frombuffer(pg.arena.map, dtype=np.int16, count=B * Hq * D,
                                         offset=oat).copy()).view(torch.float16)
    got = got.reshape(B, Hq, D).float().cuda()
    k = torch.stack([gather(kpool.cuda(), indices, indptr, b, L) for b in range(B)]).float()
    v = torch.stack([gather(vpool.cuda(), indices, indptr, b, L) for b in range(B)]).float()
    k = k.repeat_interleave(Hq // Hkv, 2)          # [B, L, Hq, D]
    v = v.repeat_interleave(Hq // Hkv, 2)
    sc = torch.einsum("bhd,blhd->bhl", q.cuda().float(), k) / D ** 0.5
    sc[:, :, :max(0, L - 1 - window)] = float("-inf")
    sc = torch.cat([sc, sinks.cuda().view(1, Hq, 1).expand(B, Hq, 1)], 2)
    pr = torch.softmax(sc, 2)[:, :, :L]
    want = torch.einsum("bhl,blhd->bhd", pr, v)
    err = float((got - want).abs().max() / want.abs().max())
    seen = min(L, window + 1)
    kv_bytes = 2 * B * seen * Hkv * D * 2
    row = {"shape": f"decode B{B} Hq{Hq} Hkv{Hkv} L{L} D{D} f16 page {ps} window {window} sinks",
           "plain_ms": ours_p, "variant_ms": ours_v, "rel_err_vs_f32": err,
           "window_gbps": kv_bytes / ours_v / 1e6, "plain_over_variant": ours_p / ours_v}
    row["case"] = benchrun.case(
        "paged-decode-variant", row["shape"][len("decode "):],
        {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "kv_len": L, "head_dim": D, "dtype": dtype,
         "page_size": ps, "window_left": window, "sinks": True},
        {"gllm_variant_kernel_us": ours_v * 1e3, "gllm_plain_kernel_us": ours_p * 1e3,
         "gllm_window_gbps": row["window_gbps"]}, ["gllm_variant_kernel_us"])
    rows.append(row)
    ok = err < 3e-3
    print(f"  {'ok  ' if ok else 'FAIL'} {row['shape']}: {ours_v * 1e3:.1f} us against the plain "
          f"decode's {ours_p * 1e3:.1f} us ({row['plain_over_variant']:.2f}x), the window's K+V at "
          f"{row['window_gbps']:.0f} GB/s, err {err:.1e}", flush=True)
    pg.free()
    return ok


def upload(pg, t):
    """t in a device tensor of its own, staged through the arena."""
    nbytes = t.numel() * t.element_size()
    dt = pg.c.call("dtensor_create", {"bytes": nbytes, "device": pg.device})["dtensor"]
    pg.extra.append(dt)
    pg.upload_pool(dt, t, pg.take(nbytes))
    return dt


def kernel_ms(client, method, params, iters):
    """The median of gllm's kernel times (kernel_ns) over iters calls, after two untimed."""
    for _ in range(2):
        client.call(method, params)
    return float(np.median([client.call(method, params)["kernel_ns"] / 1e6 for _ in range(iters)]))


class PrefillJob:
    """B sequences of prefix + new tokens in shuffled pages of ps, q for the new tokens and out,
    all in device tensors (no copies in a timed job): params is the chunked prefill's request.
    q is N(0, 1) times q_scale. extra_bytes: arena room the caller takes for itself."""

    def __init__(self, client, g, B, prefix, new, Hq, Hkv, D, ps, dtype, q_scale=None,
                 extra_bytes=0):
        self.B, self.prefix, self.new, self.Hq, self.Hkv, self.D = B, prefix, new, Hq, Hkv, D
        self.dtype, self.L = dtype, prefix + new
        L, N = self.L, B * new
        P = B * ((L + ps - 1) // ps)
        tb = N * Hq * D * 2
        self.pg = pg = Paged(client, P, ps, Hkv, D, dtype, extra_bytes + 2 * tb +
                             4 * B * L * Hkv * D * 2 + 16 * (P + 4 * B))
        self.kpool = torch.randn(P, ps, Hkv, D, generator=g).to(TORCH[dtype])
        self.vpool = torch.randn(P, ps, Hkv, D, generator=g).to(TORCH[dtype])
        pg.upload_pool(pg.kc, self.kpool)
        pg.upload_pool(pg.vc, self.vpool)
        self.indptr, self.indices, last = make_tables([L] * B, ps, P, g)
        q = torch.randn(N, Hq, D, generator=g)
        if q_scale is not None:
            q *= q_scale
        self.q = q.to(TORCH[dtype])
        self.qdt = upload(pg, self.q)
        self.odt = client.call("dtensor_create", {"bytes": tb})["dtensor"]
        pg.extra.append(self.odt)
        kc, vc = pg.pools()
        self.params = {"k_cache": kc, "v_cache": vc, "kv_indptr": pg.i32(self.indptr),
                       "kv_indices": pg.i32_device(self.indices), "kv_last_page_len": pg.i32(last),
                       "q": {"dtensor": self.qdt, "offset": 0, "dtype": dtype, "shape": [N, Hq, D]},
                       "out": {"dtensor": self.odt, "offset": 0, "dtype": dtype,
                               "shape": [N, Hq, D]},
                       "qo_indptr": pg.i32([b * new for b in range(B + 1)])}

    def seq_kv(self, b):
        """Sequence b's K and V, [L, Hkv, D] each."""
        return (gather(self.kpool, self.indices, self.indptr, b, self.L),
                gather(self.vpool, self.indices, self.indptr, b, self.L))

    def dense(self):
        """The same tokens for the dense kernel: q [B, Hq, new, D] over the packed rows, K and V
        [B, Hkv, L, D] gathered from the pages and uploaded, causal aligned bottom-right
        (Sq < Skv). Returns the request and the gathered K and V."""
        B, Hq, Hkv, new, D, L, dt = self.B, self.Hq, self.Hkv, self.new, self.D, self.L, self.dtype
        kv = [self.seq_kv(b) for b in range(B)]
        kd = torch.stack([k for k, _ in kv]).permute(0, 2, 1, 3).contiguous()
        vd = torch.stack([v for _, v in kv]).permute(0, 2, 1, 3).contiguous()
        kdt, vdt = upload(self.pg, kd), upload(self.pg, vd)
        rows = [new * Hq * D, D, Hq * D, 1]
        req = {"q": {"dtensor": self.qdt, "offset": 0, "dtype": dt, "shape": [B, Hq, new, D],
                     "strides": rows},
               "k": {"dtensor": kdt, "offset": 0, "dtype": dt, "shape": [B, Hkv, L, D]},
               "v": {"dtensor": vdt, "offset": 0, "dtype": dt, "shape": [B, Hkv, L, D]},
               "out": {"dtensor": self.odt, "offset": 0, "dtype": dt, "shape": [B, Hq, new, D],
                       "strides": rows},
               "causal": True}
        return req, kd, vd


def bench_prefill(client, g, B, prefix, new, Hq, Hkv, D, ps, dtype, iters, rows):
    """Chunked prefill of `new` tokens per sequence over a cached prefix of `prefix`, kernel
    against kernel: gllm's paged prefill, gllm's dense kernel on the same tokens (q as a
    strided view of the same buffer, K and V gathered dense), and cuDNN from a CUDA graph.
    Everything in device tensors: no copies in the timed jobs."""
    job = PrefillJob(client, g, B, prefix, new, Hq, Hkv, D, ps, dtype)
    pg, q, L = job.pg, job.q, job.L
    paged = kernel_ms(client, "attention_prefill", job.params, iters)
    dense, kd, vd = job.dense()
    dense_ms = kernel_ms(client, "attention", dense, iters)
    qt = q.cuda().view(B, new, Hq, D).transpose(1, 2)
    kt, vt = kd.cuda(), vd.cuda()
    mask = (torch.arange(L, device="cuda")[None, :] <=
            (prefix + torch.arange(new, device="cuda"))[:, None])
    fn = (lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)) \
        if prefix == 0 else \
        (lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True))
    cudnn = float("nan")
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cudnn = time_torch_graph(fn, iters)
    except RuntimeError as e:
        print(f"  cudnn unavailable: {str(e).splitlines()[0][:120]}", flush=True)
    flops = 4 * D * Hq * B * (new * prefix + new * (new + 1) / 2)
    row = {"shape": f"prefill B{B} Hq{Hq} Hkv{Hkv} prefix {prefix} new {new} D{D} {dtype} page {ps}",
           "paged_tflops": flops / paged / 1e9, "dense_tflops": flops / dense_ms / 1e9,
           "cudnn_graph_tflops": flops / cudnn / 1e9}
    row["paged_vs_dense"] = row["paged_tflops"] / row["dense_tflops"]
    row["case"] = benchrun.case(
        "paged-prefill", row["shape"][len("prefill "):],
        {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "prefix": prefix, "new": new, "head_dim": D,
         "dtype": dtype, "page_size": ps},
        {"gllm_paged_tflops": row["paged_tflops"], "gllm_dense_tflops": row["dense_tflops"],
         "cudnn_graph_tflops": row["cudnn_graph_tflops"]}, ["gllm_paged_tflops"])
    rows.append(row)
    print(f"  {row['shape']}: paged {row['paged_tflops']:.0f} TFLOP/s ({paged:.3f} ms), dense "
          f"{row['dense_tflops']:.0f} ({dense_ms:.3f} ms), paged/dense {row['paged_vs_dense']:.2f}, "
          f"cuDNN graph {row['cudnn_graph_tflops']:.0f}", flush=True)
    pg.free()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--repeat-only", type=int, default=0, metavar="N",
                    help="only run one B1 decode N times and count the different outputs")
    ap.add_argument("--shapes", default="64:4096,1:8192", metavar="B:L[:D[:HQ:HKV]],...",
                    help="decode shapes to time (f16, pages of 16; Hq 32, Hkv 8 and D 128 unless "
                         "given); the default is issue 4's pair")
    ap.add_argument("--prefill-shapes", default="8:0:2048,8:1536:512,32:0:512",
                    metavar="B:PREFIX:NEW[:PAGE[:D]],...",
                    help="chunked prefills to time (Hq 32, Hkv 8, bf16, pages of 16 and D 128 "
                         "unless PAGE and D say otherwise) against the dense kernel on the same "
                         "tokens; empty: none")
    ap.add_argument("--variant-shapes", default="64:4096:128,1:8192:128,64:4096:4095",
                    metavar="B:L:WINDOW[:HQ:HKV:D],...",
                    help="decodes with a left window and sinks (Hq 64, Hkv 8, D 64 unless given, "
                         "f16, pages of 16: GPT-OSS's local layers) timed against the plain "
                         "decode; a window of L - 1 reads every key, the variant form's own cost")
    ap.add_argument("--expect-repeatable", action="store_true",
                    help="with --repeat-only: fail unless every output is the same")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)   # now, not after a long run that then cannot write
    client = Client(args.socket)
    g = torch.Generator().manual_seed(int(time.time()))
    results, passed, total = [], 0, 0
    if args.repeat_only:
        return 0 if repeat_check(client, g, args.repeat_only, args.expect_repeatable) else 1
    if not args.skip_check:
        # GQA ratios 1, 4, 8, and 20 and 32 (more heads than one 16-row tile holds)
        cases = [(3, 8, 8, 128, 1, "f16"), (3, 16, 4, 128, 16, "bf16"), (4, 32, 4, 64, 16, "f16"),
                 (2, 8, 8, 64, 64, "bf16"), (3, 32, 8, 128, 64, "f16"), (2, 32, 4, 128, 1, "bf16"),
                 (2, 40, 2, 64, 16, "f16"), (1, 64, 2, 128, 16, "bf16")]
        for i, c in enumerate(cases):
            for prefill in (False, True):     # every other case reads kv_indices on the device
                total += 1
                passed += check(client, g, *c, prefill, i % 2 == 1, results)
        # Long chunks (the Hopper paged prefill where it applies): 1000-3000 tokens, most of
        # them new, pages of 16 and 64, D 64 and 128, GQA 4 and 8.
        for c in [(4, 32, 8, 128, 16, "bf16"), (3, 16, 4, 64, 64, "f16"), (2, 32, 4, 128, 64, "f16"),
                  (4, 16, 2, 64, 16, "bf16")]:
            total += 1
            passed += check(client, g, *c, True, True, results, min_len=1000, max_len=3000)
        # The head dims other than 64 and 128 (Phi-3's 96, Gemma's 256, 80 and 192), decode and
        # prefill, short and long, GQA 1 to 8.
        for c, lens in [((3, 32, 32, 96, 16, "bf16"), (1, 900)), ((4, 16, 8, 256, 16, "bf16"), (1, 900)),
                        ((2, 32, 8, 80, 64, "f16"), (1, 900)), ((3, 16, 2, 192, 16, "f16"), (1, 900)),
                        ((2, 16, 8, 256, 16, "f16"), (1000, 3000)),
                        ((2, 32, 32, 96, 16, "bf16"), (1000, 3000))]:
            for prefill in (False, True):
                total += 1
                passed += check(client, g, *c, prefill, True, results, min_len=lens[0],
                                max_len=lens[1])
        # The same with a page number past the pool first, found by the kernel (the table is
        # on the device): D 128 and D 64 (the Hopper paged prefill's two producers).
        for c in [(4, 32, 8, 128, 16, "bf16"), (3, 16, 4, 64, 16, "f16")]:
            total += 1
            passed += check(client, g, *c, True, True, results, min_len=1000, max_len=3000,
                            bad_page=True)
        # Batches of one-token sequences of at most 128 tokens, which are never split: their
        # plan travels in the launch's parameters (gllm_paged_attn_batch_*).
        for c in [(48, 32, 8, 128, 16, "f16"), (64, 16, 2, 64, 16, "bf16")]:
            total += 1
            passed += check(client, g, *c, False, True, results, max_len=129)
        # One long one-token sequence, split: its plan travels in the parameters too
        # (gllm_paged_attn_single_*).
        # Scale 1 spreads the blocks' maxima far apart inside the range of the fast merge's
        # fp32 sums; scale 40 puts them past it, where the last block merges the partials.
        # GQA 20: a second head chunk of 4 heads in 16 rows.
        for c, scale in [((1, 32, 8, 128, 16, "f16"), None), ((1, 16, 2, 64, 64, "bf16"), None),
                         ((1, 32, 8, 128, 16, "f16"), 1.0), ((1, 8, 8, 64, 16, "bf16"), 40.0),
                         ((1, 40, 2, 128, 16, "f16"), None)]:
            total += 1
            passed += check(client, g, *c, False, True, results, min_len=2000, max_len=6000,
                            scale=scale)
        # A few long one-token sequences (2 to 16), most split, on the general path (plan
        # uploaded, partials merged exactly): tables on the device or in an arena, some
        # sequences short enough to stay whole, scale 40, GQA 20.
        for c, dev_pages, lens, scale in [
                ((4, 32, 8, 128, 16, "f16"), True, (2000, 6000), None),
                ((8, 16, 2, 64, 64, "bf16"), False, (50, 6000), None),
                ((16, 32, 4, 128, 16, "f16"), True, (300, 3000), None),
                ((3, 8, 8, 64, 16, "bf16"), True, (2000, 6000), 40.0),
                ((2, 40, 2, 128, 16, "f16"), False, (2000, 6000), None)]:
            total += 1
            passed += check(client, g, *c, False, dev_pages, results, min_len=lens[0],
                            max_len=lens[1], scale=scale)
        # Every other device of a multi-GPU host: a decode and a prefill with everything on
        # it, and a job on device 0 naming its device tensor, which must be refused.
        for dev in range(1, len(client.caps["devices"])):
            for prefill in (False, True):
                total += 1
                passed += check(client, g, 3, 16, 4, 128, 16, "f16", prefill, True, results, dev)
            total += 1
            pg = Paged(client, 4, 16, 4, 128, "f16", 1 << 16, dev)
            kc, vc = pg.pools()
            try:
                client.call("attention_decode", {
                    "k_cache": kc, "v_cache": vc, "kv_indptr": pg.i32([0, 1]),
                    "kv_indices": pg.i32([0]), "kv_last_page_len": pg.i32([1]),
                    "q": Client.tensor(pg.arena, pg.take(4096), "f16", [1, 16, 128]),
                    "out": Client.tensor(pg.arena, pg.take(4096), "f16", [1, 16, 128]),
                    "device": 0})
                print(f"  FAIL a job on device 0 with device {dev}'s pools ran", flush=True)
            except GllmError as e:
                ok = e.code == -1004 and f"lives on device {dev}" in str(e)   # PARAM
                passed += ok
                print(f"  {'ok  ' if ok else 'FAIL'} device 0 job with device {dev}'s pools refused: {e}",
                      flush=True)
            pg.free()
        print(f"paged correctness: {passed} passed, {total - passed} failed", flush=True)
    rows = []
    d2d = d2d_gbps(args.iters)
    print(f"PyTorch device-to-device copy: {d2d:.0f} GB/s (read + written)", flush=True)
    for shape in args.shapes.split(","):
        B, L, *rest = (int(v) for v in shape.split(":"))
        D, Hq, Hkv = (rest + [128, 32, 8][len(rest):])[:3]
        bench(client, g, B, Hq, Hkv, L, D, 16, args.iters, rows, d2d)
    var_rows, var_ok = [], True
    if "variants" in client.caps.get("capabilities", {}).get("decode", {}) and \
            "window" in client.caps["capabilities"]["decode"]["variants"]:
        for shape in filter(None, args.variant_shapes.split(",")):
            B, L, W, *heads = (int(v) for v in shape.split(":"))
            Hq, Hkv, D = (heads + [64, 8, 64][len(heads):])[:3]
            var_ok &= bench_variant(client, g, B, Hq, Hkv, L, D, 16, W, args.iters, var_rows)
    else:
        print("  SKIPPED variant decode: this gllmd's decode computes no window", flush=True)
    prefill_rows = []
    for shape in filter(None, args.prefill_shapes.split(",")):
        B, prefix, new, *rest = (int(v) for v in shape.split(":"))
        page, D = (rest + [16, 128][len(rest):])[:2]
        bench_prefill(client, g, B, prefix, new, 32, 8, D, page, "bf16",
                      min(args.iters, 20), prefill_rows)
    meta = benchrun.meta("gpu_paged.py", client.caps, [os.path.basename(sys.argv[0])] + sys.argv[1:],
                         args.iters, benchrun.torch_peers(torch))
    with open(os.path.join(args.out, "gpu_paged.json"), "w") as f:
        json.dump({"schema": benchrun.SCHEMA, "meta": meta,
                   "cases": [r["case"] for r in rows + prefill_rows + var_rows],
                   "correctness": results}, f, indent=1)
        f.write("\n")
    print(f"\n{'decode shape':42} {'gllm':>6} {'cuDNN':>6} {'FA2':>6} {'xcuDNN':>7} {'ofD2D':>6} "
          f"{'cuDNNg':>7} {'xcuDNNg':>8}  (GB/s of K+V; g: peer replayed from a CUDA graph)")
    for r in rows:
        print(f"{r['shape']:42} {r['gllm_gbps']:6.0f} {r['cudnn_gbps']:6.0f} {r['fa2_gbps']:6.0f} "
              f"{r['vs_cudnn']:7.2f} {r['vs_d2d']:6.2f} {r['cudnn_graph_gbps']:7.0f} {r['vs_cudnn_graph']:8.2f}")
    if prefill_rows:
        print(f"\n{'prefill shape':58} {'paged':>6} {'dense':>6} {'ratio':>6} {'cuDNNg':>7}  (TFLOP/s)")
    for r in prefill_rows:
        print(f"{r['shape']:58} {r['paged_tflops']:6.0f} {r['dense_tflops']:6.0f} "
              f"{r['paged_vs_dense']:6.2f} {r['cudnn_graph_tflops']:7.0f}")
    if var_rows:
        print(f"\n{'variant decode shape':60} {'var us':>7} {'plain us':>8} {'ratio':>6} {'GB/s':>6}")
    for r in var_rows:
        print(f"{r['shape']:60} {r['variant_ms'] * 1e3:7.1f} {r['plain_ms'] * 1e3:8.1f} "
              f"{r['plain_over_variant']:6.2f} {r['window_gbps']:6.0f}")
    return 0 if passed == total and var_ok else 1


if __name__ == "__main__":
    sys.exit(main())
