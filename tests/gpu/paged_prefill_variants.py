#!/usr/bin/env python3
"""Chunked prefill with attention variants over the paged cache (windows, chunks, soft-cap,
ALiBi, sinks) and at head dims padded onto the Hopper kernel's (96, 80; plain or with a
variant): gllmd's output against float64, then its kernel time against gllm's plain
chunked prefill of the same tokens and gllm's dense kernel with the same variant on the same
tokens (K and V gathered dense), in one run.

Usage: paged_prefill_variants.py --socket PATH [--out DIR] [--iters N] [--shapes LIST]
A shape is B:prefix:new:D[:tokens...], tokens as dense_variants.py's (wl, chunk, cap, alibi,
sinks, f16/bf16), Hq 32 and Hkv 8, page size 16. Each is checked first (every sequence, query
heads 0 and Hq - 1, output poisoned before the call). TFLOP/s count 4 * D flops per score entry
the mask keeps. Writes DIR/paged_prefill_variants.json (gllm-bench-run/1, bench/SCHEMA.md).
Exit 1 when a check fails; speed is reported, never judged.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import benchrun  # noqa: E402
from dense_variants import Spec, head_tables, variant_request  # noqa: E402
from gllm_raw import Client  # noqa: E402
from gpu_paged import TOL, TORCH, PrefillJob, kernel_ms  # noqa: E402

DEFAULT = ("8:0:2048:128:bf16:wl1023,8:2048:2048:128:bf16:wl1023:cap50,"
           "8:2048:2048:128:bf16:wl4095,8:0:2048:128:bf16:chunk1024,8:2048:2048:64:bf16:wl1023:sinks,"
           "8:0:2048:128:f16:cap50,8:1536:512:128:bf16:alibi,8:2048:2048:64:bf16:wl127:sinks,"
           "8:0:2048:96:bf16,8:2048:2048:96:bf16:wl2047,8:0:2048:80:f16")
HQ, HKV, PS = 32, 8, 16


def parse(text):
    b, prefix, new, d, *rest = text.split(":")
    spec = Spec(":".join([f"B{b}", f"H{HQ}", f"Hkv{HKV}", f"Sq{new}",
                          f"Skv{int(prefix) + int(new)}", f"D{d}", "causal"] + rest))
    return spec, int(prefix), int(new)


def visible(spec, L, new):
    """[new, L] bool: which keys each query (at L - new + i) sees."""
    pos = torch.arange(L - new, L)[:, None]
    j = torch.arange(L)[None, :]
    m = j <= pos
    if spec.wl >= 0:
        m &= j >= pos - spec.wl
    if spec.chunk:
        m &= (j // spec.chunk) == (pos // spec.chunk)
    return m


def reference(spec, q, k, v, mask, slopes, sinks, heads):
    """float64 attention of one sequence: q [new, Hq, D], k/v [L, Hkv, D]; the heads given."""
    out = {}
    for h in heads:
        hk = h // (HQ // HKV)
        s = (q[:, h].double() @ k[:, hk].double().T) / spec.D ** 0.5
        if spec.cap:
            s = spec.cap * torch.tanh(s / spec.cap)
        if spec.alibi:
            s = s + float(slopes[h]) * (torch.arange(s.shape[1], dtype=torch.float64)[None, :] -
                                        (s.shape[1] - s.shape[0] + torch.arange(s.shape[0]))[:, None])
        s = s.masked_fill(~mask, float("-inf"))
        if spec.sinks:
            s = torch.cat([s, torch.full((s.shape[0], 1), float(sinks[h]), dtype=torch.float64)], 1)
        p = torch.softmax(s, 1)[:, :mask.shape[1]]
        out[h] = p @ v[:, hk].double()
    return out


def run(client, g, text, iters, rows, cases):
    spec, prefix, new = parse(text)
    B, D, dtype, L = spec.B, spec.D, spec.dtype, prefix + new
    N = B * new
    tb = N * HQ * D * 2
    # scores the cap changes (dense_variants.py says why); room for the checked output
    job = PrefillJob(client, g, B, prefix, new, HQ, HKV, D, PS, dtype,
                     q_scale=0.6 * spec.cap if spec.cap else None, extra_bytes=tb)
    pg, q = job.pg, job.q
    small, slopes, sinks = head_tables(client, HQ, g)
    plain, var = job.params, variant_request(spec, small, HQ)
    paged = dict(plain, **var)
    name = f"prefill B{B} Hq{HQ} Hkv{HKV} prefix {prefix} new {new} D{D} {dtype} page {PS}" + \
        spec.name()[len(Spec(spec.text).strip(masks=True).name()):]

    # The check: out poisoned (NaN) through the arena, then read back.
    oa = pg.take(tb)
    pg.arena.map[oa:oa + tb] = b"\xff" * tb
    checked = dict(paged, out=Client.tensor(pg.arena, oa, dtype, [N, HQ, D]))
    client.call("attention_prefill", checked)
    raw = np.frombuffer(pg.arena.map, dtype=np.int16, count=N * HQ * D, offset=oa).copy()
    got = torch.from_numpy(raw).view(TORCH[dtype]).reshape(N, HQ, D).double()
    mask = visible(spec, L, new)
    err, heads = 0.0, (0, HQ - 1)
    for b in range(B):
        k, v = job.seq_kv(b)
        want = reference(spec, q[b * new:(b + 1) * new], k, v, mask, slopes, sinks, heads)
        for h in heads:
            ref = want[h]
            e = float((got[b * new:(b + 1) * new, h] - ref).abs().max() / ref.abs().max())
            err = max(err, e) if e == e else float("inf")
    ok = err <= TOL[dtype]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: rel err {err:.2e} (tol {TOL[dtype]:g})", flush=True)
    cases.append({"case": name, "rel_err": err, "ok": ok})

    t_var = kernel_ms(client, "attention_prefill", paged, iters)
    t_plain = kernel_ms(client, "attention_prefill", plain, iters)
    dense, _, _ = job.dense()
    t_dense = kernel_ms(client, "attention", dict(dense, **var), iters)
    kept = float(mask.sum()) * B * HQ
    kept_plain = float(visible(Spec(spec.text).strip(masks=True), L, new).sum()) * B * HQ
    row = {"shape": name, "paged_ms": t_var, "plain_paged_ms": t_plain, "dense_ms": t_dense,
           "paged_tflops": 4 * D * kept / t_var / 1e9,
           "plain_paged_tflops": 4 * D * kept_plain / t_plain / 1e9,
           "dense_tflops": 4 * D * kept / t_dense / 1e9}
    row["vs_plain"] = row["paged_tflops"] / row["plain_paged_tflops"]
    row["vs_dense"] = row["paged_tflops"] / row["dense_tflops"]
    row["case"] = benchrun.case(
        "paged-prefill-variant", name[len("prefill "):],
        {"batch": B, "q_heads": HQ, "kv_heads": HKV, "prefix": prefix, "new": new, "head_dim": D,
         "dtype": dtype, "page_size": PS, **spec.params()},
        {"gllm_paged_tflops": row["paged_tflops"], "gllm_plain_paged_tflops": row["plain_paged_tflops"],
         "gllm_dense_tflops": row["dense_tflops"]}, ["gllm_paged_tflops"])
    rows.append(row)
    print(f"  {name}: paged {row['paged_tflops']:.0f} TFLOP/s ({t_var:.3f} ms), plain paged "
          f"{row['plain_paged_tflops']:.0f} ({row['vs_plain']:.2f}x), dense with the variant "
          f"{row['dense_tflops']:.0f} ({row['vs_dense']:.2f}x)", flush=True)
    small.release()
    pg.free()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--shapes", default=DEFAULT)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(54)
    rows, cases, ok = [], [], True
    client = Client(args.socket)
    for text in filter(None, args.shapes.split(",")):
        ok &= run(client, g, text, args.iters, rows, cases)
    print(f"correctness: {sum(c['ok'] for c in cases)} passed, "
          f"{sum(not c['ok'] for c in cases)} failed", flush=True)
    if args.out:
        meta = benchrun.meta("paged_prefill_variants.py", client.caps,
                             [os.path.basename(sys.argv[0])] + sys.argv[1:], args.iters,
                             benchrun.torch_peers(torch))
        with open(os.path.join(args.out, "paged_prefill_variants.json"), "w") as f:
            json.dump({"schema": benchrun.SCHEMA, "meta": meta,
                       "cases": [r["case"] for r in rows], "correctness": cases}, f, indent=1)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
