#!/usr/bin/env python3
"""A serving loop two ways: a decoder-only transformer with random weights prefills a batch
of prompts and decodes N tokens, with attention either in-process (PyTorch SDPA on a dense
per-sequence cache, cuDNN backend where it takes the shape) or through gllmd (a paged KV
cache in gllmd-shared device memory, Q/K/V/out as torch tensors in that memory).

Both modes run the same weights and the same tokens (teacher-forced, so that one mode's
rounding cannot change the other's inputs); their logits are compared, and each mode's
prefill time, decode tokens/s and where a decode step's time goes are printed (and written
as JSON with --json).

    GLLM_LIBRARY=build/libgllm-client.so python3 python/examples/serving_loop.py --socket S
    ... --issue            # the issue's model: 8 layers, hidden 4096, 32/8 heads, D 128

Needs a CUDA gllmd (share "cuda_vmm_fd") and torch with CUDA. Each layer's append and
attention go to gllmd as one run ordered on the current stream (GPU-side wait and signal,
no host synchronisation); --host-sync synchronises the stream before each call instead, as
before. Decode steps replay CUDA graphs of the work between attention calls, the same in
both modes, as serving stacks do (DecodeGraphs); --eager launches every kernel from Python. Without MPS every hand-over between the two processes' contexts costs the GPU a
context switch (docs/operations.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import os
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gllm  # noqa: E402


@dataclasses.dataclass
class Config:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    page_size: int = 16


SMALL = Config(layers=4, hidden=1024, heads=16, kv_heads=4, head_dim=64, ffn=2816, vocab=8192)
# Largest |logits_gllm - logits_torch| / max |logits_torch| accepted as bf16 agreement.
LOGITS_RTOL = 0.05

ISSUE = Config(layers=8, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
               vocab=32000)


class Model:
    """Random bf16 weights (scaled so that activations stay O(1)), RMSNorm, RoPE, SwiGLU."""

    def __init__(self, cfg: Config, max_pos: int, seed: int = 0):
        self.cfg = cfg
        g = torch.Generator(device="cuda").manual_seed(seed)
        dev, bf = "cuda", torch.bfloat16

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g, device=dev) / math.sqrt(shape[0])).to(bf)
        H, D = cfg.hidden, cfg.head_dim
        self.embed = torch.randn(cfg.vocab, H, generator=g, device=dev).to(bf)
        self.layers = [dict(ln1=torch.ones(H, device=dev, dtype=bf),
                            wqkv=w(H, (cfg.heads + 2 * cfg.kv_heads) * D),
                            wo=w(cfg.heads * D, H),
                            ln2=torch.ones(H, device=dev, dtype=bf),
                            w13=w(H, 2 * cfg.ffn), w2=w(cfg.ffn, H))
                       for _ in range(cfg.layers)]
        self.ln_f = torch.ones(H, device=dev, dtype=bf)
        self.lm_head = w(H, cfg.vocab)
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        ang = torch.arange(max_pos, device=dev, dtype=torch.float32)[:, None] * inv[None]
        self.cos, self.sin = ang.cos(), ang.sin()

    def rope(self, x: torch.Tensor, pos: torch.Tensor,
             out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x [N, h, D], pos [N]; into out (x's shape and dtype) when given."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        c, s = self.cos[pos][:, None], self.sin[pos][:, None]
        r = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        return r.to(x.dtype) if out is None else out.copy_(r)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, attn: Callable,
                last: Optional[torch.Tensor] = None,
                buffers: Optional[Callable[[int], tuple]] = None) -> torch.Tensor:
        """tokens, pos [N]; attn(layer, q [N, Hq, D], k, v [N, Hkv, D]) -> [N, Hq, D].
        buffers(N), when given, names where attention wants q, k and v: they are written
        there (the rotation's and v's copies land in them instead of in new tensors).
        Returns float32 logits of the rows last (all rows when None)."""
        cfg = self.cfg
        Hq, Hkv, D = cfg.heads, cfg.kv_heads, cfg.head_dim
        x = self.embed[tokens]
        N = x.shape[0]
        dst = buffers(N) if buffers is not None else (None, None, None)
        for i in range(cfg.layers):
            a = attn(i, *self.before_attention(i, x, pos, dst))
            x = self.after_attention(i, x, a)
        if last is not None:
            x = x[last]
        return self.logits(x)

    def before_attention(self, i: int, x: torch.Tensor, pos: torch.Tensor, dst: tuple) -> tuple:
        """Layer i up to attention: its q, k and v ([N, h, D]), into dst's tensors where given."""
        cfg = self.cfg
        Hq, Hkv, D, N = cfg.heads, cfg.kv_heads, cfg.head_dim, x.shape[0]
        p = self.layers[i]
        h = F.rms_norm(x, (cfg.hidden,), p["ln1"], 1e-6)
        qkv = h @ p["wqkv"]
        q = qkv[:, :Hq * D].view(N, Hq, D)
        k = qkv[:, Hq * D:(Hq + Hkv) * D].view(N, Hkv, D)
        v = qkv[:, (Hq + Hkv) * D:].view(N, Hkv, D)
        vv = v.contiguous() if dst[2] is None else dst[2].copy_(v)
        return self.rope(q, pos, dst[0]), self.rope(k, pos, dst[1]), vv

    def after_attention(self, i: int, x: torch.Tensor, a: torch.Tensor,
                        inplace: bool = False) -> torch.Tensor:
        """Layer i from attention's output a on: the output projection and the MLP, with
        their residuals (added into x itself when inplace)."""
        cfg, p = self.cfg, self.layers[i]
        o = a.reshape(x.shape[0], cfg.heads * cfg.head_dim) @ p["wo"]
        x = x.add_(o) if inplace else x + o
        h = F.rms_norm(x, (cfg.hidden,), p["ln2"], 1e-6)
        g, u = (h @ p["w13"]).chunk(2, dim=-1)
        m = (F.silu(g) * u) @ p["w2"]
        return x.add_(m) if inplace else x + m

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return (F.rms_norm(x, (self.cfg.hidden,), self.ln_f, 1e-6) @ self.lm_head).float()


class DecodeGraphs:
    """A decode step of B tokens with everything but attention replayed from CUDA graphs:
    one graph from the embedding to layer 0's q, k and v, one per layer boundary (layer i's
    projection and MLP, then layer i + 1's norm, q/k/v projection and rotation), one from
    the last layer's MLP to the logits. A step costs the host a graph launch and an
    attention call per layer instead of a dozen kernel launches per layer, as serving
    stacks run decode; both modes replay the same graphs, and attention stays outside them
    (the in-process cache grows a key per step, and gllm's call goes to gllmd). q, k, v:
    where attention reads them (gllm: its shared tensors); a: where the graphs read
    attention's output (gllm: its shared out tensor; in-process attention's is copied in)."""

    def __init__(self, model: Model, B: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 a: torch.Tensor):
        cfg = model.cfg
        self.model, self.q, self.k, self.v, self.a = model, q, k, v, a
        self.tok = torch.zeros(B, device="cuda", dtype=torch.long)
        self.pos = torch.zeros(B, device="cuda", dtype=torch.long)
        self.x = torch.zeros(B, cfg.hidden, device="cuda", dtype=torch.bfloat16)
        self.out = None
        dst = (q, k, v)

        def first() -> None:
            self.x.copy_(model.embed[self.tok])
            model.before_attention(0, self.x, self.pos, dst)

        def boundary(i: int) -> Callable[[], None]:
            def seg() -> None:
                model.after_attention(i, self.x, self.a, inplace=True)
                model.before_attention(i + 1, self.x, self.pos, dst)
            return seg

        def last() -> None:
            model.after_attention(cfg.layers - 1, self.x, self.a, inplace=True)
            self.out = model.logits(self.x)

        segs = [first] + [boundary(i) for i in range(cfg.layers - 1)] + [last]
        # Warm-up outside capture (cuBLAS picks and allocates its workspace), on a side
        # stream as capture wants, then one graph per segment in one memory pool.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for seg in segs:
                seg()
        torch.cuda.current_stream().wait_stream(side)
        self.graphs: List[torch.cuda.CUDAGraph] = []
        pool = None
        for seg in segs:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                seg()
            pool = g.pool() if pool is None else pool
            self.graphs.append(g)

    def step(self, tokens: torch.Tensor, position: int, attn: Callable) -> torch.Tensor:
        """tokens [B] at position; attn(layer, q, k, v) as for Model.forward. Returns the
        logits buffer (the next step overwrites it)."""
        self.tok.copy_(tokens)
        self.pos.fill_(position)
        self.graphs[0].replay()
        for i in range(self.model.cfg.layers):
            o = attn(i, self.q, self.k, self.v)
            if o is not self.a:
                self.a.copy_(o)
            self.graphs[i + 1].replay()
        return self.out


class Timer:
    """Host wall time of the work between start and stop, the stream drained at both."""

    def __init__(self) -> None:
        self.total = 0.0

    def __enter__(self) -> "Timer":
        torch.cuda.synchronize()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        torch.cuda.synchronize()
        self.total += time.perf_counter() - self.t0


def _sdpa_backends() -> Dict[str, list]:
    from torch.nn.attention import SDPBackend
    return {"cudnn": [SDPBackend.CUDNN_ATTENTION], "flash": [SDPBackend.FLASH_ATTENTION],
            "efficient": [SDPBackend.EFFICIENT_ATTENTION]}


class TorchAttention:
    """In-process attention: dense caches [B, Hkv, max_len, D] per layer and SDPA. Decode
    folds each KV head's query group into the query length (exact without a mask), so no
    backend needs GQA support; prefill uses enable_gqa, or expands K/V where the backend
    refuses it."""

    def __init__(self, cfg: Config, B: int, max_len: int):
        self.cfg, self.B = cfg, B
        shape = (B, cfg.kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device="cuda", dtype=torch.bfloat16) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, device="cuda", dtype=torch.bfloat16) for _ in range(cfg.layers)]
        self.len = 0
        self.chosen: Dict[str, str] = {}
        self.profile: Optional[List[float]] = None

    def reset(self) -> None:
        self.len = 0

    def graph_buffers(self) -> tuple:
        """q, k, v and the attention output the decode graphs use: plain device tensors."""
        cfg, B, bf = self.cfg, self.B, torch.bfloat16
        return tuple(torch.zeros(B, h, cfg.head_dim, device="cuda", dtype=bf)
                     for h in (cfg.heads, cfg.kv_heads, cfg.kv_heads, cfg.heads))

    def _sdpa(self, phase: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool) -> torch.Tensor:
        from torch.nn.attention import sdpa_kernel
        # cuDNN builds an execution plan per shape: fine for prefill, but a decode step's key
        # length grows by one every step, so there it would plan anew each time (tens of ms);
        # FlashAttention takes any length without planning and goes first for decode.
        order = ("flash", "cudnn", "efficient") if phase == "decode" else ("cudnn", "flash", "efficient")
        every = [f"{b}{g}" for b in order for g in ("+gqa", "")]
        first = self.chosen.get(phase)
        tries = ([first] if first else []) + [n for n in every if n != first]
        err = None
        for name in tries:
            backend, gqa = name.split("+")[0], name.endswith("+gqa")
            kk, vv = k, v
            if not gqa and k.shape[1] != q.shape[1]:
                r = q.shape[1] // k.shape[1]
                kk, vv = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
            try:
                with sdpa_kernel(_sdpa_backends()[backend]):
                    if gqa:
                        o = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal,
                                                           enable_gqa=True)
                    else:
                        o = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
                self.chosen[phase] = name
                return o
            except RuntimeError as e:
                err = e
        raise RuntimeError(f"no SDPA backend takes the {phase} shape: {err}")

    def _timed(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        if self.profile is None:
            return fn()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = fn()
        e.record()
        self.profile.append((s, e))
        return out

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, cfg = self.B, self.cfg
        S = q.shape[0] // B

        def run() -> torch.Tensor:
            self.k[layer][:, :, :S] = k.view(B, S, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            self.v[layer][:, :, :S] = v.view(B, S, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            qq = q.view(B, S, cfg.heads, cfg.head_dim).transpose(1, 2)
            o = self._sdpa("prefill", qq, self.k[layer][:, :, :S], self.v[layer][:, :, :S], True)
            return o.transpose(1, 2).reshape(B * S, cfg.heads, cfg.head_dim)
        out = self._timed(run)
        if layer == cfg.layers - 1:
            self.len = S
        return out

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, cfg, L = self.B, self.cfg, self.len
        g = cfg.heads // cfg.kv_heads

        def run() -> torch.Tensor:
            self.k[layer][:, :, L] = k
            self.v[layer][:, :, L] = v
            qq = q.view(B, cfg.kv_heads, g, cfg.head_dim)       # query groups as the length
            o = self._sdpa("decode", qq, self.k[layer][:, :, :L + 1], self.v[layer][:, :, :L + 1],
                           False)
            return o.reshape(B, cfg.heads, cfg.head_dim)
        out = self._timed(run)
        if layer == cfg.layers - 1:
            self.len = L + 1
        return out

    def profile_ms(self) -> float:
        torch.cuda.synchronize()
        ms = sum(s.elapsed_time(e) for s, e in self.profile or [])
        self.profile = []
        return ms


class GllmAttention:
    """Attention through gllmd: one PagedKVCache (pools in gllmd-shared memory, one pair per
    layer, one page table per step) and Q/K/V/out staging tensors in shared memory."""

    def __init__(self, client: gllm.Client, cfg: Config, B: int, max_len: int, max_tokens: int,
                 host_sync: bool = False):
        self.c, self.cfg, self.B = client, cfg, B
        pages = B * -(-max_len // cfg.page_size) + 8
        self.cache = client.paged_kv_cache(num_pages=pages, page_size=cfg.page_size,
                                           num_kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                                           dtype=torch.bfloat16, max_batch=B, memory="shared",
                                           num_layers=cfg.layers)
        bf = torch.bfloat16
        self.q = client.torch_tensor((max_tokens, cfg.heads, cfg.head_dim), bf)
        self.k = client.torch_tensor((max_tokens, cfg.kv_heads, cfg.head_dim), bf)
        self.v = client.torch_tensor((max_tokens, cfg.kv_heads, cfg.head_dim), bf)
        self.out = client.torch_tensor((max_tokens, cfg.heads, cfg.head_dim), bf)
        self._views: Dict[int, tuple] = {}
        self.stream = torch.cuda.current_stream()   # the loop's one stream, named once
        self.seqs: List[int] = []
        # per layer while profiling: (gllm call's stream span in s, its jobs' kernel s), or
        # with ordering (start event, end event, the run's Job) until profile_parts reads them
        self.profile: Optional[list] = None
        self.host_sync = host_sync
        self.host_s = 0.0                # host time in the ordered calls while profiling
        client.ordered = not host_sync   # host_sync: each call synchronises the stream first

    def reset(self) -> None:
        for s in self.seqs:
            self.cache.free_sequence(s)
        self.seqs = [self.cache.add_sequence() for _ in range(self.B)]

    def begin(self, counts: List[int]) -> None:
        self.cache.step(self.seqs, counts)

    def buffers(self, N: int) -> tuple:
        """q, k and v of N tokens in shared memory, for the model to write into."""
        return self._views_of(N)[:3]

    def graph_buffers(self) -> tuple:
        """q, k, v and out of a decode step in shared memory: the decode graphs write the
        first three and read the fourth, which decode returns as is."""
        return self._views_of(self.B)

    def _views_of(self, N: int) -> tuple:
        views = self._views.get(N)
        if views is None:
            # the same view objects every layer and step: gllm recognises them at once
            views = self._views[N] = (self.q[:N], self.k[:N], self.v[:N], self.out[:N])
        return views

    def _stage(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        qs, ks, vs, os_ = self._views_of(q.shape[0])
        for dst, src in ((qs, q), (ks, k), (vs, v)):
            if src is not dst:          # not written in place by the model
                dst.copy_(src)
        return qs, ks, vs, os_

    def _jobs(self, layer: int, qs, ks, vs, os_, decode: bool) -> None:
        if not self.host_sync:
            # One run on the current stream: gllmd's append waits for the stream, its
            # attention signals it; nothing here waits for the GPU.
            if self.profile is not None:
                ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev[0].record()
                t0 = time.perf_counter()
            job = self.cache.append_attention_step(layer, ks, vs, qs, os_, decode,
                                                   stream=self.stream)
            if self.profile is not None:
                self.host_s += time.perf_counter() - t0
                ev[1].record()
                self.profile.append((ev[0], ev[1], job))
            return
        if self.profile is not None:
            torch.cuda.current_stream().synchronize()    # the producers' time is not gllmd's
            t0 = time.perf_counter()
        r1 = self.cache.append_step(layer, ks, vs)
        if decode:
            r2 = self.cache.decode_step(layer, qs, os_)
        else:
            r2 = self.cache.prefill_step(layer, qs, os_)
        if self.profile is not None:
            self.profile.append((time.perf_counter() - t0, (r1.kernel_ns + r2.kernel_ns) * 1e-9))

    def profile_parts(self) -> tuple:
        """(gllm calls' span as the stream or host sees it, their jobs' kernel time), in s,
        summed over the profiled layers."""
        span = kern = 0.0
        for p in self.profile or []:
            if len(p) == 3:
                p[1].synchronize()
                span += p[0].elapsed_time(p[1]) * 1e-3
                kern += sum(j.result().kernel_ns for j in p[2].run) * 1e-9
            else:
                span += p[0]
                kern += p[1]
        return span, kern

    def prefill(self, layer: int, q, k, v) -> torch.Tensor:
        qs, ks, vs, os_ = self._stage(q, k, v)
        self._jobs(layer, qs, ks, vs, os_, decode=False)
        # the next layer's call synchronises the stream before gllmd writes out again
        return os_

    def decode(self, layer: int, q, k, v) -> torch.Tensor:
        qs, ks, vs, os_ = self._stage(q, k, v)
        self._jobs(layer, qs, ks, vs, os_, decode=True)
        return os_

    def release(self) -> None:
        self.c.synchronize()     # every ordered job's reply claimed (and its errors raised)
        self.cache.release()
        del self.q, self.k, self.v, self.out, self._views


def run_mode(model: Model, backend, tokens: torch.Tensor, prompt: int, steps: int,
             profile_steps: int, keep_logits: bool, graphs: Optional[DecodeGraphs] = None) -> dict:
    """Prefills tokens[:, :prompt], decodes `steps` tokens (timed together for tokens/s),
    then profile_steps more, each timed part by part. Tokens are teacher-forced. graphs:
    decode steps replay these (made for this backend's graph_buffers())."""
    B = tokens.shape[0]
    dev = tokens.device
    backend.reset()
    is_gllm = isinstance(backend, GllmAttention)
    bufs = backend.buffers if is_gllm else None   # gllm: the model writes into shared memory
    logits = []
    flat = tokens[:, :prompt].reshape(-1)
    pos = torch.arange(prompt, device=dev).repeat(B)
    last = torch.arange(B, device=dev) * prompt + prompt - 1
    with Timer() as t_pre:
        if is_gllm:
            backend.begin([prompt] * B)
        out = model.forward(flat, pos, backend.prefill, last=last, buffers=bufs)
    if keep_logits:
        logits.append(out)

    def step(s: int) -> torch.Tensor:
        if is_gllm:
            backend.begin([1] * B)
        if graphs is not None:
            return graphs.step(tokens[:, prompt + s], prompt + s, backend.decode)
        step_pos = torch.full((B,), prompt + s, device=dev, dtype=torch.long)
        return model.forward(tokens[:, prompt + s], step_pos, backend.decode, buffers=bufs)

    with Timer() as t_dec:
        for s in range(steps):
            out = step(s)
            if keep_logits:
                logits.append(out.clone())
    parts = []
    host_calls: List[float] = []
    for s in range(steps, steps + profile_steps):
        backend.profile = []
        with Timer() as t_step:
            step(s)
        if is_gllm:
            wall, kern = backend.profile_parts()
            host_calls.append(backend.host_s)
            backend.host_s = 0.0
        else:
            kern = backend.profile_ms() * 1e-3
            wall = kern
        backend.profile = None
        parts.append((kern, wall - kern, t_step.total - wall))
    res = {"batch": B, "prompt": prompt, "steps": steps,
           "prefill_ms": t_pre.total * 1e3,
           "decode_tokens_per_s": B * steps / t_dec.total if steps else 0.0,
           "decode_step_ms": t_dec.total / max(steps, 1) * 1e3}
    if parts:
        n = len(parts)
        res["profile_step_ms"] = {
            "attention_kernel": sum(p[0] for p in parts) / n * 1e3,
            "gllmd_added": sum(p[1] for p in parts) / n * 1e3,
            "rest": sum(p[2] for p in parts) / n * 1e3,
            "steps": n,
            **({"gllm_calls_host": sum(host_calls) / n * 1e3}
               if host_calls and not backend.host_sync else {}),
            "how": (("gllm, ordered on the stream: kernel_ns of the append and decode jobs; "
                     "added: CUDA events around each layer's call on the stream minus that; "
                     "rest: the step's wall time minus those spans")
                    if is_gllm and not backend.host_sync else
                    "gllm, host-synchronised: kernel_ns of the append and decode jobs; added: "
                    "their calls' wall time minus that; rest: the step's wall time minus the calls"
                    if is_gllm else
                    "torch: CUDA events around the cache write and SDPA; rest: the remainder")}
    if keep_logits:
        res["_logits"] = torch.stack(logits)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=None, help="gllmd's socket (default: GLLM_SOCKET, ...)")
    ap.add_argument("--issue", action="store_true", help="the issue's model and 2k prompts")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens (256; --issue 2048)")
    ap.add_argument("--steps", type=int, default=32, help="decode tokens")
    ap.add_argument("--profile-steps", type=int, default=4,
                    help="extra decode steps timed part by part (not in tokens/s)")
    ap.add_argument("--mode", choices=("both", "torch", "gllm"), default="both")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of each mode per batch, alternating their order; tokens/s is the "
                         "median")
    ap.add_argument("--host-sync", action="store_true",
                    help="gllm calls synchronise the stream on the host instead of ordering on it")
    ap.add_argument("--eager", action="store_true",
                    help="decode steps launch every kernel from Python, instead of replaying "
                         "CUDA graphs of the work between attention calls (DecodeGraphs)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("serving_loop: needs torch with CUDA", file=sys.stderr)
        return 77
    cfg = ISSUE if args.issue else SMALL
    prompt = args.prompt or (2048 if args.issue else 256)
    batches = [int(b) for b in args.batches.split(",")]
    steps, pst = args.steps, args.profile_steps
    total = prompt + steps + pst
    model = Model(cfg, total)
    client = gllm.connect(args.socket) if args.mode != "torch" else None
    if client is not None and client.caps.share != "cuda_vmm_fd":
        print(f"serving_loop: gllmd shares {client.caps.share!r}, not CUDA memory",
              file=sys.stderr)
        return 77
    results = {"config": dataclasses.asdict(cfg), "prompt": prompt, "steps": steps,
               "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "gllm_ordering": "host-synchronised" if args.host_sync else "stream-ordered",
               "decode": "eager" if args.eager else "CUDA graphs between attention calls",
               "rounds": args.rounds,
               "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")),
               "runs": []}
    g = torch.Generator(device="cuda").manual_seed(1)
    failed = False
    for B in batches:
        tokens = torch.randint(0, cfg.vocab, (B, total), generator=g, device="cuda")
        row = {"batch": B}
        logits = {}
        modes = ["torch", "gllm"] if args.mode == "both" else [args.mode]
        rates: Dict[str, List[float]] = {m: [] for m in modes}
        # Rounds alternate the modes' order, so that drift on the machine (clocks, the host's
        # load) does not favour one; tokens/s is each mode's median over the rounds.
        order = [m for rnd in range(args.rounds) for m in (modes if rnd % 2 == 0 else modes[::-1])]
        for i, mode in enumerate(order):
            first = mode not in row
            if mode == "torch":
                backend = TorchAttention(cfg, B, total)
            else:
                backend = GllmAttention(client, cfg, B, total, B * prompt,
                                        host_sync=args.host_sync)
            # warm-up at the measured shape: kernels chosen for these lengths, libraries
            # loaded, pages touched, clocks up (a first pass at a batch size ran up to 2x
            # slower than the next on an H100, in both modes)
            graphs = None if args.eager else DecodeGraphs(model, B, *backend.graph_buffers())
            run_mode(model, backend, tokens, prompt, 8, 0, False, graphs)
            r = run_mode(model, backend, tokens, prompt, steps, pst if first else 0,
                         B == batches[0] and first, graphs)
            rates[mode].append(r["decode_tokens_per_s"])
            if "_logits" in r:
                logits[mode] = r.pop("_logits")
            if mode == "torch":
                r["sdpa"] = dict(backend.chosen)
            else:
                backend.release()
            del backend, graphs
            torch.cuda.empty_cache()
            if first:
                row[mode] = r
            else:
                row[mode]["decode_tokens_per_s_rounds"] = rates[mode]
                row[mode]["decode_tokens_per_s"] = statistics.median(rates[mode])
            prof = r.get("profile_step_ms", {})
            print(f"B{B:<3} {mode:5}: prefill {r['prefill_ms']:9.2f} ms, decode "
                  f"{r['decode_tokens_per_s']:10.1f} tok/s ({r['decode_step_ms']:.3f} ms/step); "
                  f"step: attention {prof.get('attention_kernel', 0):.3f} ms, gllmd added "
                  f"{prof.get('gllmd_added', 0):.3f} ms, rest {prof.get('rest', 0):.3f} ms"
                  + (f", host in gllm calls {prof['gllm_calls_host']:.3f} ms"
                     if "gllm_calls_host" in prof else "")
                  + (f"  sdpa {r['sdpa']}" if "sdpa" in r else ""), flush=True)
        if len(logits) == 2:
            a, b = logits["gllm"], logits["torch"]
            diff = (a - b).abs().max().item()
            scale = b.abs().max().item()
            agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
            # bf16 tolerance: both modes round Q/K/V/out to bf16 at the same places; what
            # differs is accumulation order inside attention, a few bf16 ulps per layer
            ok = diff / scale <= LOGITS_RTOL
            row["logits"] = {"max_abs_diff": diff, "max_abs_ref": scale, "rel": diff / scale,
                             "argmax_agreement": agree, "rtol": LOGITS_RTOL, "agree": ok}
            print(f"B{B:<3} logits: max |gllm - torch| {diff:.4f} of max |torch| {scale:.3f} "
                  f"(rel {diff / scale:.2e}, {'within' if ok else 'OUTSIDE'} {LOGITS_RTOL}); "
                  f"argmax agrees on {agree * 100:.1f}% of rows")
            failed |= not ok
        if "torch" in row and "gllm" in row:
            row["gllm_over_torch_tokens_per_s"] = row["gllm"]["decode_tokens_per_s"] / \
                row["torch"]["decode_tokens_per_s"]
            print(f"B{B:<3} gllm/torch decode tokens/s: {row['gllm_over_torch_tokens_per_s']:.3f}"
                  + (f" (medians of {args.rounds} rounds each)" if args.rounds > 1 else ""))
        results["runs"].append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if client is not None:
        client.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
