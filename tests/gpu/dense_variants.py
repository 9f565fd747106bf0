#!/usr/bin/env python3
"""Dense prefill with attention variants (window, chunk, soft-cap, ALiBi, sinks): gllmd's
output and lse against float64, then speed against PyTorch FlexAttention and cuDNN causal.

Usage: dense_variants.py (--socket PATH | --gllmd PATH) [--shapes LIST] [--iters N]
                         [--out DIR] [--skip-peers] [--smoke]
Each shape is checked first (batch 0, first and last query head, output poisoned before the
call), then timed: gllm as gpu_compare.py times it (per call, and `repeat` runs back to back),
FlexAttention compiled with the same mask and scores, replayed from a CUDA graph, and cuDNN's
plain causal kernel at the same shape. TFLOP/s count 4 * D flops per score entry the mask
keeps. Writes DIR/dense_variants.json, a gllm-bench-run/1 document (bench/SCHEMA.md). Exit 1
when a check fails; speed is reported, never judged. --smoke: tiny shapes, checks only, torch
on the CPU, against a CPU gllmd (--gllmd starts one): the plumbing and the reference anywhere.
"""
import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import benchrun  # noqa: E402
from gllm_raw import Arena, Client, GllmError  # noqa: E402
from gpu_compare import (GRAPH_REPS, LSE_TOL, TOL, TORCH, Job, from_numpy_bits,  # noqa: E402
                         graph_ms, graph_of, time_torch)
from prefill_shapes import shape_name  # noqa: E402

FIELDS = ("window_left", "window_right", "attention_chunk", "logits_soft_cap", "alibi_slopes",
          "sinks")


class Spec:
    """One shape and its variant, from a spec such as B2:H64:Hkv8:S4096:D64:bf16:causal:wl127:sinks
    (tokens: B, H, Hkv, S or Sq and Skv, D, a dtype, causal, wl and wr (window_left/right),
    chunk, cap (logits_soft_cap), alibi (slopes 2^(-8(h+1)/H)), sinks)."""

    def __init__(self, text):
        self.text = text
        self.B, self.H, self.Hkv, self.Sq, self.Skv, self.D = 1, 8, None, 256, None, 128
        self.dtype, self.causal = "bf16", False
        self.wl, self.wr, self.chunk, self.cap = -1, -1, 0, 0.0
        self.alibi = self.sinks = False
        for tok in text.split(":"):
            m = re.fullmatch(r"(B|H|Hkv|S|Sq|Skv|D|wl|wr|chunk)(-?\d+)|cap([0-9.]+)", tok)
            if tok in TOL:
                self.dtype = tok
            elif tok in ("causal", "alibi", "sinks"):
                setattr(self, tok, True)
            elif m and m.group(3):
                self.cap = float(m.group(3))
            elif m:
                key, val = m.group(1), int(m.group(2))
                if key == "S":
                    self.Sq = self.Skv = val
                else:
                    setattr(self, key, val)
            else:
                raise ValueError(f"shape {text!r}: unknown token {tok!r}")
        self.Hkv = self.Hkv or self.H
        self.Skv = self.Skv or self.Sq
        if self.H % self.Hkv or min(self.B, self.H, self.Sq, self.Skv, self.D) < 1:
            raise ValueError(f"shape {text!r}: want B, H, S, D >= 1 and H a multiple of Hkv")

    def strip(self, masks=False):
        """The same shape without its score changes (soft-cap, ALiBi, sinks), and with masks
        also without its window and chunk: plain causal (or none)."""
        s = Spec(self.text)
        s.cap, s.alibi, s.sinks = 0.0, False, False
        if masks:
            s.wl = s.wr = -1
            s.chunk = 0
        return s

    def without(self, field):
        """The same shape and variant less one field (wl, wr, chunk, cap, alibi, sinks)."""
        s = Spec(self.text)
        setattr(s, field, {"wl": -1, "wr": -1, "chunk": 0, "cap": 0.0}.get(field, False))
        return s

    def fields(self):
        """The variant fields this spec sets."""
        return [f for f, on in (("wl", self.wl >= 0), ("wr", self.wr >= 0), ("chunk", self.chunk),
                                ("cap", self.cap), ("alibi", self.alibi), ("sinks", self.sinks)) if on]

    def has_mods(self):
        return self.cap > 0 or self.alibi or self.sinks

    def has_masks(self):
        return self.wl >= 0 or self.wr >= 0 or self.chunk > 0

    def name(self):
        if self.Sq == self.Skv:
            n = shape_name(self.B, self.H, self.Hkv, self.Sq, self.D, self.dtype, self.causal)
        else:
            n = (f"B{self.B} H{self.H}{f' Hkv{self.Hkv}' if self.Hkv != self.H else ''} "
                 f"Sq{self.Sq} Skv{self.Skv} D{self.D} {self.dtype}{' causal' if self.causal else ''}")
        n += f" window_left {self.wl}" if self.wl >= 0 else ""
        n += f" window_right {self.wr}" if self.wr >= 0 else ""
        n += f" chunk {self.chunk}" if self.chunk else ""
        n += f" soft-cap {self.cap:g}" if self.cap else ""
        n += " alibi" if self.alibi else ""
        n += " sinks" if self.sinks else ""
        return n

    def params(self):
        p = {"batch": self.B, "heads": self.H, "kv_heads": self.Hkv, "q_len": self.Sq,
             "kv_len": self.Skv, "head_dim": self.D, "dtype": self.dtype, "causal": self.causal}
        if self.wl >= 0:
            p["window_left"] = self.wl
        if self.wr >= 0:
            p["window_right"] = self.wr
        if self.chunk:
            p["attention_chunk"] = self.chunk
        if self.cap:
            p["logits_soft_cap"] = self.cap
        if self.alibi:
            p["alibi_slopes"] = True
        if self.sinks:
            p["sinks"] = True
        return p


# Issue 54's peers on an H200: D128 causal and each variant alone, soft-cap with ALiBi, the
# transforms at D64; GPT-OSS's local layers; Gemma's D256: plain causal, its global layers
# (soft-cap 50) and its local ones (window 1024 + soft-cap 50).
PRESETS = {
    "causal": "B2:H32:S4096:D128:bf16:causal",
    "window": "B2:H32:S4096:D128:bf16:causal:wl1023",
    "softcap": "B2:H32:S4096:D128:bf16:causal:cap50",
    "alibi": "B2:H32:S4096:D128:bf16:causal:alibi",
    "chunk": "B2:H32:S4096:D128:bf16:causal:chunk1024",
    "softcap-alibi": "B2:H32:S4096:D128:bf16:causal:cap50:alibi",
    "d64-softcap": "B4:H32:S4096:D64:f16:causal:cap50",
    "d64-alibi": "B4:H32:S4096:D64:bf16:alibi",
    "gptoss": "B2:H64:Hkv8:S4096:D64:bf16:causal:wl127:sinks",
    "d256": "B4:H16:S8192:D256:bf16:causal",
    "d256-softcap": "B4:H16:S8192:D256:bf16:causal:cap50",
    "d256-window-softcap": "B4:H16:S8192:D256:bf16:causal:wl1023:cap50",
}
# --smoke: every variant alone and in pairs, both head dims, GQA, and the bottom-right
# alignment with Sq < Skv and Sq > Skv (rows that see no key: the sink alone, or zeros).
SMOKE = [
    "B2:H4:S256:D128:bf16:causal", "B2:H4:Hkv2:S240:D64:f16:causal:wl63",
    "B1:H4:S300:D128:bf16:causal:cap50", "B2:H4:S256:D64:f16:causal:alibi",
    "B1:H4:S300:D64:bf16:causal:chunk100", "B2:H8:Hkv2:S256:D64:bf16:causal:wl31:sinks",
    "B1:H2:S200:D128:f16:causal:wl50:cap30", "B1:H4:Sq100:Skv300:D64:f16:wl40:wr20",
    "B1:H4:Sq300:Skv200:D64:bf16:causal:sinks", "B1:H4:Sq300:Skv200:D128:f16:causal:alibi:wl60",
    "B1:H4:S270:D64:bf16:chunk64:cap20",
]


def visible(spec, device):
    """[Sq, Skv] bool: query row r (at position i = r + Skv - Sq) sees key j, per
    docs/PROTOCOL.md's "Variants"."""
    i = torch.arange(spec.Sq, device=device)[:, None] + (spec.Skv - spec.Sq)
    j = torch.arange(spec.Skv, device=device)[None, :]
    m = torch.ones(spec.Sq, spec.Skv, dtype=torch.bool, device=device)
    if spec.causal:
        m &= j <= i
    if spec.wl >= 0:
        m &= j >= i - spec.wl
    if spec.wr >= 0:
        m &= j <= i + spec.wr
    if spec.chunk:
        m &= torch.div(i, spec.chunk, rounding_mode="floor") == torch.div(j, spec.chunk,
                                                                          rounding_mode="floor")
    return m


def alibi_slopes(H):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32)


def head_tables(client, H, gen):
    """The per-head tensors of a variant: ALiBi slopes (alibi_slopes) at offset 0 and sinks in
    [-2, 6] (at the top, heavier than a window of 128 keys' own weight) at 4 H of an arena of
    their own. Returns (arena, slopes, sinks)."""
    slopes = alibi_slopes(H)
    sinks = torch.rand(H, generator=gen) * 8 - 2
    small = Arena(client, 4096 + 8 * H)
    small.view(0, "f32", (H,))[...] = slopes.numpy()
    small.view(4 * H, "f32", (H,))[...] = sinks.numpy()
    return small, slopes, sinks


def variant_request(spec, small, H):
    """spec's variant fields as a request's keys, the slopes and sinks in small (head_tables)."""
    p = {}
    if spec.wl >= 0:
        p["window_left"] = spec.wl
    if spec.wr >= 0:
        p["window_right"] = spec.wr
    if spec.chunk:
        p["attention_chunk"] = spec.chunk
    if spec.cap:
        p["logits_soft_cap"] = spec.cap
    if spec.alibi:
        p["alibi_slopes"] = Client.tensor(small, 0, "f32", (H,))
    if spec.sinks:
        p["sinks"] = Client.tensor(small, 4 * H, "f32", (H,))
    return p


def reference(spec, q, k, v, heads, slopes, sinks, device):
    """float64 out and lse of batch 0's given query heads: q [len(heads), Sq, D], k and v their
    KV heads' rows. The scaled score, soft-capped, plus ALiBi's slope * (j - i), masked; the
    sink a key of logit sinks[h] and value zero; lse over every key, the sink's included."""
    scale = 1 / math.sqrt(spec.D)
    mask = visible(spec, device)
    i = torch.arange(spec.Sq, device=device)[:, None] + (spec.Skv - spec.Sq)
    j = torch.arange(spec.Skv, device=device)[None, :]
    out = torch.empty(q.shape, dtype=torch.float64, device=device)
    lse = torch.empty(q.shape[:2], dtype=torch.float64, device=device)
    for n, h in enumerate(heads):
        s = (q[n].to(device, torch.float64) @ k[n].to(device, torch.float64).T) * scale
        if spec.cap:
            s = spec.cap * torch.tanh(s / spec.cap)
        if spec.alibi:
            s = s + float(slopes[h]) * (j - i).to(torch.float64)
        s = s.masked_fill(~mask, float("-inf"))
        if spec.sinks:
            sink = torch.full((spec.Sq, 1), float(sinks[h]), dtype=torch.float64, device=device)
            lse[n] = torch.logsumexp(torch.cat([s, sink], 1), dim=-1)
        else:
            lse[n] = torch.logsumexp(s, dim=-1)
        p = torch.nan_to_num(torch.exp(s - lse[n][:, None]), nan=0.0)   # rows with no key
        out[n] = p @ v[n].to(device, torch.float64)
    return out.cpu(), lse.cpu()


def rel_err(got, want):
    if torch.isnan(got).any().item():
        return float("inf")
    top = want.abs().max().item()
    return (got - want).abs().max().item() / (top if top > 0 else 1.0)


def lse_err(got, want):
    """Largest absolute difference where want is finite; inf when got has NaN or its
    infinite entries are not want's."""
    finite = torch.isfinite(want)
    if torch.isnan(got).any().item() or not torch.equal(finite, torch.isfinite(got)):
        return float("inf")
    if not torch.equal(got[~finite], want[~finite]):
        return float("inf")
    return (got - want)[finite].abs().max().item() if finite.any().item() else 0.0


class VariantJob:
    """A Job (q, k, v, out, lse in one arena) and the variant's slopes and sinks in a second."""

    def __init__(self, client, spec, gen):
        self.spec = spec
        self.job = Job(client, spec.B, spec.H, spec.Hkv, spec.Sq, spec.Skv, spec.D, spec.dtype)
        q = torch.randn(spec.B, spec.H, spec.Sq, spec.D, generator=gen)
        if spec.cap:
            # scores of spread about 0.6 * cap, so that the cap changes most rows' softmax
            # (N(0, 1) scores are far below it and a check could not tell it was applied)
            q *= 0.6 * spec.cap
        dt = TORCH[spec.dtype]
        self.q = q.to(dt)
        self.k, self.v = (torch.randn(spec.B, spec.Hkv, spec.Skv, spec.D, generator=gen).to(dt)
                          for _ in range(2))
        self.job.fill(self.q, self.k, self.v)
        self.small, self.slopes, self.sinks = head_tables(client, spec.H, gen)

    def params(self, spec, lse=False):
        """The attention request for spec (this job's shape, any subset of its variant)."""
        p = dict(self.job.params, causal=spec.causal)
        if not lse:
            del p["lse"]
        p.update(variant_request(spec, self.small, spec.H))
        return p

    def heads(self):
        return sorted({0, self.spec.H - 1})

    def kv_rows(self, heads):
        g = self.spec.H // self.spec.Hkv
        kv = [h // g for h in heads]
        return self.q[0, heads], self.k[0, kv], self.v[0, kv]

    def release(self):
        self.job.release()
        self.small.release()


def check(client, vj, device, results):
    """gllm's output and lse of batch 0's first and last head against float64; also how far
    they are from the same shape without the variant (a check that could not tell the two
    apart would prove nothing). Returns (ok, want) with want the float64 output, for a peer's
    check."""
    spec, job, heads = vj.spec, vj.job, vj.heads()
    name = spec.name()
    job.poison()
    try:
        client.call("attention", vj.params(spec, lse=True))
    except GllmError as e:
        print(f"FAIL {name}: {e}", flush=True)
        results.append({"case": name, "error": str(e), "ok": False})
        return False, None
    got = from_numpy_bits(job.views[3][0, heads], spec.dtype).to(torch.float64)
    got_lse = torch.from_numpy(job.lse[0, heads].copy()).to(torch.float64)
    q, k, v = vj.kv_rows(heads)
    want, want_lse = reference(spec, q, k, v, heads, vj.slopes, vj.sinks, device)
    err, lerr = rel_err(got, want), lse_err(got_lse, want_lse)
    ok = err <= TOL[spec.dtype] and lerr <= LSE_TOL
    entry = {"case": name, "heads": heads, "rel_err": err, "lse_err": lerr, "ok": ok}
    apart = []
    for field in spec.fields():
        # the reference less this one field: gllm's output must be outside the tolerance of it
        pw, pl = reference(spec.without(field), q, k, v, heads, vj.slopes, vj.sinks, device)
        e, le = rel_err(got, pw), lse_err(got_lse, pl)
        entry.setdefault("without", {})[field] = {"rel_err": e, "lse_err": le}
        seen = e > TOL[spec.dtype] or le > LSE_TOL
        entry["variant_visible"] = entry.get("variant_visible", True) and seen
        apart.append(f"{field} {e:.1e}/{le:.1e}" + ("" if seen else " (NOT VISIBLE)"))
    apart = f"; without {', '.join(apart)}" if apart else ""
    print(f"{'ok  ' if ok else 'FAIL'} {name} (batch 0, heads {','.join(map(str, heads))}): rel err "
          f"{err:.2e} (tol {TOL[spec.dtype]:.0e}), lse err {lerr:.1e} (tol {LSE_TOL:.0e}){apart}",
          flush=True)
    results.append(entry)
    return ok, want


def time_gllm(client, params, iters):
    """gllm as gpu_compare.py times it: the median kernel_ns and wall time of single calls,
    and of jobs of GRAPH_REPS runs back to back (`repeat`), as graph-replayed peers run."""
    slow = 1 + benchrun.slowdown()
    client.call("attention", params)   # warm-up
    kern, e2e = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        r = client.call("attention", params)
        e2e.append((time.perf_counter() - t0) * 1e3 * slow)
        kern.append(r["kernel_ns"] / 1e6 * slow)
    b2b = [client.call("attention", dict(params, repeat=GRAPH_REPS))["kernel_ns"] / 1e6 * slow
           for _ in range(max(3, iters // 2))]
    return float(np.median(kern)), float(np.median(b2b)), float(np.median(e2e))


def peer_ms(fn, iters):
    """fn's milliseconds per call replayed from a CUDA graph; per call (time_torch) where
    capture fails. Returns (ms, "graph" or "per call", the capture's error or None)."""
    try:
        return graph_ms(graph_of(fn), iters), "graph", None
    except Exception as e:   # noqa: BLE001 (any capture failure: the fallback is the point)
        torch.cuda.synchronize()
        return time_torch(fn, iters), "per call", str(e).splitlines()[0] if str(e) else type(e).__name__


def flex_mods(spec, slopes):
    """FlexAttention's mask_mod (causal, window, chunk, at the bottom-right offset) and
    score_mod (soft-cap on the scaled score, then ALiBi; None without either) for spec."""
    off, wl, wr, c, causal = spec.Skv - spec.Sq, spec.wl, spec.wr, spec.chunk, spec.causal
    cap, alibi = spec.cap, spec.alibi

    def mask_mod(b, h, q_idx, kv_idx):
        i = q_idx + off
        keep = kv_idx >= 0
        if causal:
            keep = keep & (kv_idx <= i)
        if wl >= 0:
            keep = keep & (kv_idx >= i - wl)
        if wr >= 0:
            keep = keep & (kv_idx <= i + wr)
        if c:
            keep = keep & (i // c == kv_idx // c)
        return keep

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap:
            score = cap * torch.tanh(score / cap)
        if alibi:
            score = score + slopes[h] * (kv_idx - (q_idx + off))
        return score

    return mask_mod, (score_mod if cap or alibi else None)


def check_flex_mods(spec, slopes, device):
    """The Flex peer's mask_mod and score_mod evaluated on the whole [Sq, Skv] grid against the
    reference's mask and scores (here, without Flex: a smoke run has no GPU); ok or not."""
    mask_mod, score_mod = flex_mods(spec, slopes)
    i = torch.arange(spec.Sq, device=device)[:, None]
    j = torch.arange(spec.Skv, device=device)[None, :]
    h = torch.tensor(spec.H - 1, device=device)
    ok = torch.equal(mask_mod(0, h, i, j).expand(spec.Sq, spec.Skv), visible(spec, device))
    if score_mod is not None:
        s = torch.randn(spec.Sq, spec.Skv, dtype=torch.float64, device=device) * 40
        want = spec.cap * torch.tanh(s / spec.cap) if spec.cap else s
        if spec.alibi:
            want = want + float(slopes[spec.H - 1]) * (j - i - (spec.Skv - spec.Sq)).double()
        ok = ok and torch.allclose(score_mod(s, 0, h, i, j), want, rtol=1e-6, atol=1e-6)
    return ok


def flex_call(spec, qd, kd, vd, slopes):
    """FlexAttention compiled with spec's mask (create_block_mask) and score_mod; None for
    sinks, which Flex has no form for."""
    if spec.sinks:
        return None
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    # every shape compiles its own kernel: no guard cache from an earlier shape, and room for
    # the recompiles of one (the limit's name changed across PyTorch versions)
    torch._dynamo.reset()
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    mask_mod, score_mod = flex_mods(spec, slopes.cuda())
    block_mask = None
    if spec.has_masks() or spec.causal:
        block_mask = create_block_mask(mask_mod, None, None, spec.Sq, spec.Skv, device="cuda")
    flex = torch.compile(flex_attention, dynamic=False)
    gqa = spec.Hkv != spec.H
    return lambda: flex(qd, kd, vd, score_mod=score_mod, block_mask=block_mask,  # noqa: E731
                        scale=1 / math.sqrt(spec.D), enable_gqa=gqa)


def cudnn_causal_call(spec, qd, kd, vd):
    """cuDNN's plain causal attention at the shape (SDPA, CUDNN_ATTENTION), with GQA through
    SDPA's enable_gqa, else K and V expanded to every query head; (fn, context) or None."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    calls = [lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=True,  # noqa: E731
                                                    enable_gqa=spec.Hkv != spec.H)]
    if spec.Hkv != spec.H:
        ke, ve = (x.repeat_interleave(spec.H // spec.Hkv, dim=1) for x in (kd, vd))
        calls.append(lambda: F.scaled_dot_product_attention(qd, ke, ve, is_causal=True))  # noqa: E731
    for fn in calls:
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                fn()
            return fn, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)  # noqa: E731
        except RuntimeError as e:
            print(f"  cudnn unavailable: {e}".splitlines()[0], flush=True)
    return None


def bench(client, vj, want, iters, skip_peers, rows, notes):
    """Times gllm (the variant, and plain causal and the mask alone where they differ) and the
    peers; appends a row."""
    spec = vj.spec
    per_entry = 4 * spec.D * spec.B * spec.H
    kept = int(visible(spec, "cpu").sum())
    flops = per_entry * kept
    causal = Spec(spec.text).strip(masks=True)
    causal.causal = True
    causal_flops = per_entry * int(visible(causal, "cpu").sum())
    row = {"shape": spec.name(), "kept_entries": kept}
    ms, b2b, e2e = time_gllm(client, vj.params(spec), iters)
    row.update(gllm_ms=ms, gllm_tflops=flops / ms / 1e9, gllm_b2b_ms=b2b,
               gllm_b2b_tflops=flops / b2b / 1e9, e2e_ms=e2e)
    bases = []
    if spec.has_mods() or spec.has_masks():
        bases.append(("causal", causal, causal_flops))
    if spec.has_mods() and spec.has_masks():
        mask_only = spec.strip()
        bases.append(("mask", mask_only, flops))
    for label, base, bflops in bases:
        _, bb, _ = time_gllm(client, vj.params(base), iters)
        row[f"gllm_{label}_b2b_tflops"] = bflops / bb / 1e9
        row[f"vs_gllm_{label}"] = row["gllm_b2b_tflops"] / row[f"gllm_{label}_b2b_tflops"]
    row["flex_tflops"] = row["cudnn_causal_tflops"] = float("nan")
    row["flex_timing"] = row["flex_rel_err"] = None
    if not skip_peers:
        qd, kd, vd = vj.q.cuda(), vj.k.cuda(), vj.v.cuda()
        try:
            fn = flex_call(spec, qd, kd, vd, vj.slopes)
            if fn is None:
                notes.append(f"{spec.name()}: sinks have no FlexAttention form; compared with "
                             "gllm's own kernel without sinks (vs_gllm_mask) instead")
                print(f"  {notes[-1]}", flush=True)
            else:
                out = fn()
                if want is not None:
                    heads = vj.heads()
                    row["flex_rel_err"] = rel_err(out[0, heads].double().cpu(), want)
                    if row["flex_rel_err"] > TOL[spec.dtype]:
                        notes.append(f"{spec.name()}: FlexAttention's output differs from the "
                                     f"float64 reference (rel err {row['flex_rel_err']:.1e}): "
                                     "its figure is not the same computation")
                        print(f"  {notes[-1]}", flush=True)
                del out
                fms, how, why = peer_ms(fn, iters)
                row["flex_tflops"], row["flex_timing"] = flops / fms / 1e9, how
                if why:
                    notes.append(f"{spec.name()}: FlexAttention in a CUDA graph failed ({why}); "
                                 "timed per call")
                    print(f"  {notes[-1]}", flush=True)
        except Exception as e:   # noqa: BLE001 (a peer that cannot run is a note, not a failure)
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            notes.append(f"{spec.name()}: FlexAttention unavailable: {why}")
            print(f"  {notes[-1]}", flush=True)
        cd = cudnn_causal_call(spec, qd, kd, vd)
        if cd is not None:
            fn, ctx = cd
            with ctx():
                cms, how, why = peer_ms(fn, iters)
            row["cudnn_causal_tflops"] = causal_flops / cms / 1e9
            if why:
                notes.append(f"{spec.name()}: cuDNN in a CUDA graph failed ({why}); timed per call")
        del qd, kd, vd
        torch.cuda.empty_cache()
    row["vs_flex"] = row["gllm_b2b_tflops"] / row["flex_tflops"]
    row["vs_cudnn_causal"] = row["gllm_b2b_tflops"] / row["cudnn_causal_tflops"]
    figures = {"gllm_tflops": row["gllm_tflops"], "gllm_kernel_ms": ms, "gllm_e2e_ms": e2e,
               "gllm_back_to_back_tflops": row["gllm_b2b_tflops"]}
    for label, _, _ in bases:
        figures[f"gllm_{label}_back_to_back_tflops"] = row[f"gllm_{label}_b2b_tflops"]
    flex_key = "torch_flex_graph_tflops" if row["flex_timing"] == "graph" else "torch_flex_per_call_tflops"
    figures[flex_key] = row["flex_tflops"]
    figures["cudnn_causal_graph_tflops"] = row["cudnn_causal_tflops"]
    row["case"] = benchrun.case("prefill-variant", spec.name(), dict(spec.params(), kept_entries=kept),
                                figures, ["gllm_tflops"])
    rows.append(row)
    f = lambda x: f"{x:.0f}" if math.isfinite(x) else "-"   # noqa: E731
    print(f"  {spec.name()}: gllm {f(row['gllm_tflops'])} TFLOP/s ({ms:.3f} ms; back to back "
          f"{f(row['gllm_b2b_tflops'])}, {b2b:.3f} ms)"
          + "".join(f", own {label} {f(row[f'gllm_{label}_b2b_tflops'])} ({row[f'vs_gllm_{label}']:.2f}x)"
                    for label, _, _ in bases)
          + f", Flex {f(row['flex_tflops'])}{' per call' if row['flex_timing'] == 'per call' else ''}"
          f", cuDNN causal {f(row['cudnn_causal_tflops'])}; {kept} kept entries per head", flush=True)


def start_gllmd(path, backend, tmp):
    sock = os.path.join(tmp, "gllmd.sock")
    proc = subprocess.Popen([path, "--socket", sock, "--backend", backend, "--threads", "2"],
                            stderr=open(os.path.join(tmp, "gllmd.log"), "w"))
    for _ in range(1000):
        if os.path.exists(sock):
            return proc, sock
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    raise SystemExit(f"gllmd did not start (log: {os.path.join(tmp, 'gllmd.log')})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="a running gllmd's socket")
    ap.add_argument("--gllmd", help="start this gllmd, with --backend")
    ap.add_argument("--backend", default=None, help="--gllmd's backend: cpu with --smoke, else cuda")
    ap.add_argument("--shapes", default=None,
                    help="comma-separated presets (" + ", ".join(PRESETS) + ") or specs such as "
                    "B2:H64:Hkv8:S4096:D64:bf16:causal:wl127:sinks (B, H, Hkv, S or Sq/Skv, D, "
                    "dtype, causal, wl/wr N, chunkN, capX, alibi, sinks); default: every preset")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default=None, help="write DIR/dense_variants.json")
    ap.add_argument("--skip-peers", action="store_true", help="time gllm only")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes, checks only, torch on the CPU (no GPU needed)")
    args = ap.parse_args()
    if bool(args.socket) == bool(args.gllmd):
        ap.error("give one of --socket and --gllmd")
    try:
        names = args.shapes.split(",") if args.shapes else (SMOKE if args.smoke else list(PRESETS))
        specs = [Spec(PRESETS.get(n, n)) for n in names]
    except ValueError as e:
        ap.error(str(e))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    # the float64 reference's device: the GPU where there is one
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if args.skip_peers is False and not args.smoke and device == "cpu":
        ap.error("timing the peers needs a GPU: give --skip-peers or --smoke")
    proc = tmp = None
    if args.gllmd:
        tmp = tempfile.mkdtemp(prefix="dense-variants-")
        proc, args.socket = start_gllmd(args.gllmd, args.backend or ("cpu" if args.smoke else "cuda"), tmp)
    try:
        client = Client(args.socket)
        dev = client.caps["devices"][0]
        dense = client.caps.get("capabilities", {}).get("dense", {})
        dims = dense.get("head_dims") or f"up to {dense.get('max_head_dim')}"
        print(f"gllmd {client.caps['daemon']} backend {client.caps['backend']}: {dev['name']}; "
              f"dense variants {dense.get('variants', [])}, head dims {dims}", flush=True)
        gen = torch.Generator().manual_seed(54)
        results, rows, notes = [], [], []
        for spec in specs:
            vj = VariantJob(client, spec, gen)
            ok, want = check(client, vj, device, results)
            if args.smoke and results[-1].get("variant_visible") is False:
                results[-1]["ok"] = False   # the smoke run proves the check, so this fails it
                print(f"FAIL {spec.name()}: the check cannot tell a variant field from its absence")
            if args.smoke and not spec.sinks:
                fm = check_flex_mods(spec, vj.slopes, device)
                results[-1]["flex_mods_ok"] = fm
                results[-1]["ok"] = results[-1]["ok"] and fm
                print(f"{'ok  ' if fm else 'FAIL'} {spec.name()}: the Flex peer's mask_mod and "
                      "score_mod match the reference's mask and scores", flush=True)
            if not args.smoke and ok:
                bench(client, vj, want, args.iters, args.skip_peers, rows, notes)
            vj.release()
        passed = sum(r["ok"] for r in results)
        print(f"correctness: {passed} passed, {len(results) - passed} failed", flush=True)
        if args.out:
            peers = None if args.smoke else benchrun.torch_peers(torch)
            meta = benchrun.meta("dense_variants.py", client.caps,
                                 [os.path.basename(sys.argv[0])] + sys.argv[1:], args.iters, peers)
            with open(os.path.join(args.out, "dense_variants.json"), "w") as f:
                json.dump({"schema": benchrun.SCHEMA, "meta": meta, "cases": [r["case"] for r in rows],
                           "device_info": dev, "correctness": results, "notes": notes}, f, indent=1)
                f.write("\n")
        if rows:
            print(f"\n{'variant shape':62} {'gllm':>6} {'gllmb':>6} {'causal':>6} {'xcausal':>7} "
                  f"{'xmask':>6} {'Flex':>6} {'xFlex':>6} {'cuDNNc':>6} {'xcuDNNc':>7}  (TFLOP/s over "
                  "the kept entries; b: back to back, the x columns from it; Flex and cuDNN causal "
                  "from CUDA graphs, * per call)")
            def g(r, k, w, p):
                return f"{r[k]:{w}.{p}f}" if k in r and math.isfinite(r[k]) else f"{'-':>{w}}"
            for r in rows:
                print(f"{r['shape']:62} {g(r, 'gllm_tflops', 6, 0)} {g(r, 'gllm_b2b_tflops', 6, 0)} "
                      f"{g(r, 'gllm_causal_b2b_tflops', 6, 0)} {g(r, 'vs_gllm_causal', 7, 2)} "
                      f"{g(r, 'vs_gllm_mask', 6, 2)} {g(r, 'flex_tflops', 6, 0)}"
                      f"{'*' if r['flex_timing'] == 'per call' else ' '}{g(r, 'vs_flex', 5, 2)} "
                      f"{g(r, 'cudnn_causal_tflops', 6, 0)} {g(r, 'vs_cudnn_causal', 7, 2)}")
            for n in notes:
                print(f"note: {n}")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    return 0 if results and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
