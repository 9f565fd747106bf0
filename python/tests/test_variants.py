"""Attention variants (window, chunk, soft-cap, ALiBi, sinks, Dv below Dqk): the float64
reference against hand-computed cases, the params the keywords fill in, mode caps, and
dense, decode and prefill jobs against the reference.

A job test is skipped, saying which field, only where the daemon's mode caps lack a field
it needs; a library from before the variants answers mode caps with none (gllm.h's rule for
a daemon from before them), so against one every job test says so."""
import ctypes
import math

import numpy as np
import pytest

import gllm
from gllm import _lib, errors, variants
from refs import attention64

TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}
ALL_FIELDS = frozenset(variants.VARIANT_NAMES.values())


# --- the reference itself ------------------------------------------------------------------
def _qkv(rng, B=1, Hq=2, Hkv=1, Sq=6, Skv=6, D=8, Dv=None):
    return (rng.standard_normal((B, Hq, Sq, D)), rng.standard_normal((B, Hkv, Skv, D)),
            rng.standard_normal((B, Hkv, Skv, Dv or D)))


def _row(q, k, v, keys, logit=lambda s, j: s):
    """One row by hand: softmax over the listed keys of logit(scale * q.k_j, j)."""
    s = np.array([logit(q @ k[j] / math.sqrt(q.shape[0]), j) for j in keys])
    p = np.exp(s - s.max())
    return (p[:, None] * v[list(keys)]).sum(0) / p.sum(), s.max() + math.log(p.sum())


def test_reference_window_chunk():
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, Sq=3, Skv=7)            # rows at positions 4, 5, 6
    out, lse = attention64(q, k, v, window_left=2, window_right=1)
    for r, i in enumerate((4, 5, 6)):
        keys = [j for j in range(7) if i - 2 <= j <= i + 1]
        want, want_lse = _row(q[0, 1, r], k[0, 0], v[0, 0], keys)
        np.testing.assert_allclose(out[0, 1, r], want, rtol=1e-12)
        np.testing.assert_allclose(lse[0, 1, r], want_lse, rtol=1e-12)
    # causal is a window with right edge 0
    np.testing.assert_allclose(attention64(q, k, v, causal=True)[0],
                               attention64(q, k, v, window_right=0)[0], rtol=1e-12)
    # chunks of 3: position 4 sees 3..5 (not causal), 3..4 (causal)
    out, _ = attention64(q, k, v, attention_chunk=3)
    np.testing.assert_allclose(out[0, 0, 0], _row(q[0, 0, 0], k[0, 0], v[0, 0], [3, 4, 5])[0],
                               rtol=1e-12)
    out, _ = attention64(q, k, v, attention_chunk=3, causal=True)
    np.testing.assert_allclose(out[0, 0, 0], _row(q[0, 0, 0], k[0, 0], v[0, 0], [3, 4])[0],
                               rtol=1e-12)
    # window_left 0 and right 0: each query sees itself alone, out = its value row
    out, lse = attention64(q, k, v, window_left=0, window_right=0)
    np.testing.assert_allclose(out[0, 0], v[0, 0, 4:7], rtol=1e-12)


def test_reference_soft_cap_alibi_sinks():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, Sq=2, Skv=5)
    q *= 4                                       # scores large enough for the cap to bite
    cap = 1.5
    slopes = np.array([0.5, 0.125])
    out, lse = attention64(q, k, v, causal=True, logits_soft_cap=cap, alibi_slopes=slopes)
    for h in range(2):
        for r, i in enumerate((3, 4)):
            def logit(s, j):                     # the cap first, then ALiBi (Gemma 2's order)
                return cap * math.tanh(s / cap) + slopes[h] * (j - i)
            want, want_lse = _row(q[0, h, r], k[0, 0], v[0, 0], range(i + 1), logit)
            np.testing.assert_allclose(out[0, h, r], want, rtol=1e-12)
            np.testing.assert_allclose(lse[0, h, r], want_lse, rtol=1e-12)
    # a sink adds exp(sink) to the denominator and nothing to the numerator
    sinks = np.array([0.7, -2.0])
    plain, plain_lse = attention64(q, k, v)
    out, lse = attention64(q, k, v, sinks=sinks)
    total = np.logaddexp(plain_lse, sinks[None, :, None])
    np.testing.assert_allclose(lse, total, rtol=1e-12)
    np.testing.assert_allclose(out, plain * np.exp(plain_lse - total)[..., None], rtol=1e-12)


def test_reference_empty_rows_and_dv():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, Sq=4, Skv=2)             # causal rows 0, 1 are at -2, -1: no key
    out, lse = attention64(q, k, v, causal=True)
    assert np.all(out[:, :, :2] == 0) and np.all(np.isneginf(lse[:, :, :2]))
    assert np.all(np.isfinite(lse[:, :, 2:]))
    sinks = np.array([0.25, -1.0])
    out, lse = attention64(q, k, v, causal=True, sinks=sinks)
    assert np.all(out[:, :, :2] == 0)
    np.testing.assert_array_equal(lse[0, :, :2], np.repeat(sinks[:, None], 2, axis=1))
    # Dv below Dqk: the weights do not depend on v, so out is the wide result's first Dv
    q, k, v = _qkv(rng, Sq=3, Skv=5, D=16, Dv=16)
    wide, _ = attention64(q, k, v, causal=True)
    narrow, _ = attention64(q, k, v[..., :6], causal=True)
    assert narrow.shape == (1, 2, 3, 6)
    np.testing.assert_allclose(narrow, wide[..., :6], rtol=1e-12)


# --- the params the keywords fill in ----------------------------------------------------------
def _fake_tensor(n):
    t = _lib.GllmTensor()
    t.memory, t.rank, t.shape[0] = 0x1000 + n, 1, n
    return t


def _fill(**kw):
    p = _lib.sized(_lib.GllmAttentionParams)
    seen = []

    def struct_of(x):
        seen.append(x)
        return _fake_tensor(len(seen)), x == "cuda"
    cuda = variants.set_variant(p, struct_of, "gllm_attention", **kw)
    return p, cuda, seen


@pytest.fixture
def variant_library(monkeypatch):
    """set_variant as against a library that has the variant functions."""
    real = _lib.has
    monkeypatch.setattr(_lib, "has", lambda name: True if name ==
                        "gllm_client_check_variant" else real(name))


def test_keywords_fill_the_variant(variant_library):
    p, cuda, _ = _fill()
    assert p.flags == 0 and not cuda
    assert bytes(p.variant) == bytes(_lib.GllmAttentionVariant())   # zeroed: no variant
    p, _, _ = _fill(window_left=-1, window_right=-1)
    assert p.flags & _lib.ATTN_WINDOW == 0
    p, _, _ = _fill(window_left=128)
    assert p.flags & _lib.ATTN_WINDOW
    assert (p.variant.window_left, p.variant.window_right) == (128, -1)
    p, _, _ = _fill(window_right=0)
    assert p.flags & _lib.ATTN_WINDOW
    assert (p.variant.window_left, p.variant.window_right) == (-1, 0)
    p, cuda, seen = _fill(attention_chunk=8192, logits_soft_cap=30.0, alibi_slopes="a",
                          sinks="cuda")
    assert p.flags & _lib.ATTN_WINDOW == 0 and cuda and seen == ["a", "cuda"]
    assert p.variant.attention_chunk == 8192 and p.variant.logits_soft_cap == 30.0
    assert p.variant.alibi_slopes.memory == 0x1001 and p.variant.sinks.memory == 0x1002
    # values a C field cannot hold are refused here, not wrapped into others
    for kw in ({"window_left": 1 << 31}, {"attention_chunk": -1},
               {"attention_chunk": 1 << 32}):
        with pytest.raises(ValueError):
            _fill(**kw)
    with pytest.raises(TypeError):
        _fill(window_left=2.5)


def test_paged_params_carry_the_variant(variant_library):
    p = _lib.sized(_lib.GllmPagedAttentionParams)
    variants.set_variant(p, lambda x: (_fake_tensor(4), False), "gllm_attention_decode",
                         window_left=3, sinks="s")
    assert p.flags == _lib.ATTN_WINDOW and p.variant.window_left == 3
    assert p.variant.sinks.shape[0] == 4
    # the variant is the struct's last field, where gllm.h appends it
    assert _lib.GllmPagedAttentionParams._fields_[-1][0] == "variant"
    assert _lib.GllmAttentionParams._fields_[-1][0] == "variant"


def test_older_library_refuses_variants(monkeypatch):
    monkeypatch.setattr(_lib, "has", lambda name: False)
    p, _, _ = _fill()                            # no variant: fine
    with pytest.raises(gllm.NotSupportedError) as e:
        _fill(logits_soft_cap=50.0)
    assert "predates attention variants" in e.value.message


def test_variant_error_class():
    code = errors.CODES["VARIANT"]
    assert code == -1030
    assert errors.error_class(code) is gllm.VariantError
    err = errors.from_code(code, "gllm_attention", "sinks: not computed by this backend")
    assert isinstance(err, gllm.VariantError) and err.name == "GLLM_EVARIANT"
    assert "sinks: not computed" in str(err)


# --- against the daemon ----------------------------------------------------------------------
def test_mode_caps(client):
    lim = client.limits
    for mode in ("dense", "decode", "prefill"):
        mc = client.mode_caps(mode)
        assert isinstance(mc, gllm.ModeCaps) and mc.mode == mode
        assert mc.variants <= ALL_FIELDS
        assert 0 < mc.max_head_dim <= lim.max_head_dim
        assert all(0 < d <= mc.max_head_dim for d in mc.head_dims)
        assert mc.head_dim_ok(mc.head_dims[0] if mc.head_dims else mc.max_head_dim)
        assert client.mode_caps(variants.MODES[mode]) is mc    # asked once per connection
    with pytest.raises(ValueError):
        client.mode_caps("sparse")
    with pytest.raises(ValueError):
        client.mode_caps(3)
    if _lib.has("gllm_client_mode_caps") and client.caps.backend == "cpu":
        # the CPU backend is the reference backend: it computes every variant in every mode
        for mode in ("dense", "decode", "prefill"):
            assert client.mode_caps(mode).variants == ALL_FIELDS, mode


def needs(client, mode, *fields):
    missing = sorted(set(fields) - client.mode_caps(mode).variants)
    if missing:
        lib = "" if _lib.has("gllm_client_mode_caps") else \
            " (this libgllm-client predates gllm_client_mode_caps)"
        pytest.skip(f"gllmd's {client.caps.backend} backend does not compute "
                    f"{', '.join(missing)} in mode {mode}{lib}")


def _fields_of(kw, dv=False):
    out = set()
    for name in kw:
        out.add("window" if name.startswith("window_") else name)
    if dv:
        out.add("head_dim_v")
    return out


class Carver:
    """Tensors one after another in an arena, 64-byte aligned."""

    def __init__(self, mem):
        self.mem, self.off = mem, 0

    def take(self, dtype, shape):
        v = self.mem.numpy(dtype, shape, self.off)
        self.off += -(-v.nbytes // 64) * 64
        return v

    def put(self, dtype, data):
        v = self.take(dtype, data.shape)
        v[:] = gllm.f32_to_bf16(data) if dtype == "bf16" else data
        return v


def _quantised(rng, shape, dtype):
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    if dtype == "bf16":
        return gllm.bf16_to_f32(gllm.f32_to_bf16(x)).astype(np.float64)
    return x.astype(np.float16 if dtype == "f16" else np.float32).astype(np.float64)


def _as64(x, dtype):
    return gllm.bf16_to_f32(x).astype(np.float64) if dtype == "bf16" else x.astype(np.float64)


def _variant_tensors(c, kw, Hq, rng):
    """alibi_slopes / sinks keywords as f32 [Hq] views in the arena, and as float64."""
    kw, ref = dict(kw), dict(kw)
    if kw.get("alibi_slopes") == "gen":
        s = (2.0 ** -(8.0 * np.arange(1, Hq + 1) / Hq)).astype(np.float32)  # ALiBi's slopes
        kw["alibi_slopes"], ref["alibi_slopes"] = c.put("f32", s), s.astype(np.float64)
    if kw.get("sinks") == "gen":
        s = rng.uniform(-1, 2, Hq).astype(np.float32)
        kw["sinks"], ref["sinks"] = c.put("f32", s), s.astype(np.float64)
    return kw, ref


DENSE_CASES = [
    # dtype, B, Hq, Hkv, Sq, Skv, D, Dv, causal, variant keywords
    ("f32", 1, 4, 2, 9, 21, 64, 64, True, {"window_left": 5}),
    ("f32", 2, 4, 4, 12, 12, 64, 64, False, {"window_left": 3, "window_right": 2}),
    ("f32", 1, 2, 1, 16, 16, 64, 64, True, {"attention_chunk": 5}),
    ("f32", 1, 4, 2, 7, 19, 128, 128, False, {"logits_soft_cap": 0.5}),
    ("f32", 2, 4, 2, 8, 8, 64, 64, True, {"alibi_slopes": "gen"}),
    ("f32", 1, 4, 1, 6, 13, 64, 64, True, {"sinks": "gen"}),
    ("f32", 1, 4, 2, 10, 10, 128, 64, True, {}),                          # Dv below Dqk
    ("f16", 1, 8, 2, 11, 30, 64, 64, True,
     {"window_left": 6, "logits_soft_cap": 2.0, "sinks": "gen"}),
    ("bf16", 1, 4, 2, 16, 16, 128, 64, False,
     {"window_left": 4, "window_right": 0, "attention_chunk": 6, "alibi_slopes": "gen"}),
    ("f32", 1, 2, 2, 6, 3, 64, 64, True, {"sinks": "gen"}),              # rows seeing no key
]


@pytest.mark.parametrize("dtype,B,Hq,Hkv,Sq,Skv,D,Dv,causal,kw", DENSE_CASES)
def test_dense_variants(client, dtype, B, Hq, Hkv, Sq, Skv, D, Dv, causal, kw):
    needs(client, "dense", *_fields_of(kw, Dv != D))
    rng = np.random.default_rng(Sq * 131 + Skv * 7 + D + len(kw))
    q64, k64, v64 = (_quantised(rng, s, dtype) for s in
                     ((B, Hq, Sq, D), (B, Hkv, Skv, D), (B, Hkv, Skv, Dv)))
    with client.arena(1 << 22) as a:
        c = Carver(a)
        q, k, v = (c.put(dtype, x.astype(np.float32)) for x in (q64, k64, v64))
        out = c.take(dtype, (B, Hq, Sq, Dv))
        lse = c.take("f32", (B, Hq, Sq))
        out[:] = 0x7FC0 if dtype == "bf16" else np.nan       # what a skipped write leaves
        args, ref = _variant_tensors(c, kw, Hq, rng)
        client.attention(q, k, v, out, causal=causal, lse=lse, **args)
        want, want_lse = attention64(q64, k64, v64, causal=causal, **ref)
        np.testing.assert_allclose(_as64(out, dtype), want, atol=TOL[dtype], rtol=TOL[dtype])
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)
        # the module-level call takes the same keywords; with a scale, too
        gllm.attention(q, k, v, out, causal=causal, scale=0.2, **args)
        want, _ = attention64(q64, k64, v64, causal=causal, scale=0.2, **ref)
        np.testing.assert_allclose(_as64(out, dtype), want, atol=TOL[dtype], rtol=TOL[dtype])
        # and the variant changes the answer: the test would see it dropped
        if kw:
            plain, _ = attention64(q64, k64, v64, causal=causal, scale=0.2)
            assert np.abs(plain - want).max() > 20 * TOL[dtype]


def test_variant_refused_by_name(client):
    """A field the mode does not compute is refused before anything runs (VariantError),
    its name in the message; the CPU backend computes them all, so it needs another."""
    if not _lib.has("gllm_client_check_variant"):
        pytest.skip("this libgllm-client predates gllm_client_check_variant")
    missing = sorted(ALL_FIELDS - client.mode_caps("dense").variants - {"head_dim_v"})
    if not missing:
        pytest.skip(f"gllmd's {client.caps.backend} backend computes every variant field "
                    "in mode dense: nothing to refuse")
    field = missing[0]
    kw = {"window": {"window_left": 4}, "attention_chunk": {"attention_chunk": 4},
          "logits_soft_cap": {"logits_soft_cap": 5.0}, "alibi_slopes": {"alibi_slopes": "gen"},
          "sinks": {"sinks": "gen"}}[field]
    with client.arena(1 << 20) as a:
        c = Carver(a)
        q, k, v, out = (c.take("f16", (1, 4, 8, 64)) for _ in range(4))
        args, _ = _variant_tensors(c, kw, 4, np.random.default_rng(0))
        before = client.status().jobs_done
        with pytest.raises(gllm.VariantError) as e:
            client.attention(q, k, v, out, **args)
        assert e.value.message
        assert client.status().jobs_done == before


def test_bad_values_refused_with_the_message(client):
    """Values no backend takes are refused by the library before anything is sent, as
    ParamError, ShapeError or HeadDimError with a message naming the field."""
    if not _lib.has("gllm_client_check_variant"):
        pytest.skip("this libgllm-client predates gllm_client_check_variant")
    with client.arena(1 << 20) as a:
        c = Carver(a)
        q, k, v, out = (c.take("f32", (1, 4, 8, 64)) for _ in range(4))
        short = c.put("f32", np.zeros(3, np.float32))             # 3 values for 4 heads
        wide, wide_out = (c.take("f32", (1, 4, 8, 128)) for _ in range(2))   # Dv above Dqk
        before = client.status()
        for kw, cls, word in (({"window_left": -2}, gllm.ParamError, "window_left"),
                              ({"logits_soft_cap": -1.0}, gllm.ParamError, "logits_soft_cap"),
                              ({"logits_soft_cap": float("nan")}, gllm.ParamError,
                               "logits_soft_cap"),
                              ({"attention_chunk": 1 << 31}, gllm.ParamError,
                               "attention_chunk"),
                              ({"sinks": short}, gllm.Error, "sinks"),
                              ({"alibi_slopes": short}, gllm.Error, "alibi_slopes")):
            with pytest.raises(cls) as e:
                client.attention(q, k, v, out, **kw)
            assert word in e.value.message, (kw, e.value.message)
        with pytest.raises(gllm.Error) as e:
            client.attention(q, k, wide, wide_out)
        assert "head dim" in e.value.message
        after = client.status()
        assert after.jobs_done == before.jobs_done


def test_older_library_sends_nothing(client, monkeypatch):
    """Against a library without the variant functions a variant is refused before any
    job is sent: it would run as full attention."""
    with client.arena(1 << 20) as a:
        c = Carver(a)
        q, k, v, out = (c.take("f32", (1, 2, 4, 64)) for _ in range(4))
        before = client.status()
        monkeypatch.setattr(_lib, "has", lambda name: False)
        with pytest.raises(gllm.NotSupportedError):
            client.attention(q, k, v, out, window_left=1)
        monkeypatch.undo()
        after = client.status()
        assert (after.jobs_done, after.jobs_failed) == (before.jobs_done, before.jobs_failed)


# --- paged -------------------------------------------------------------------------------------
PAGED_CASES = [
    # dtype, Hq, Hkv, D, Dv, page_size, variant keywords
    ("f32", 4, 2, 64, 64, 4, {"window_left": 6}),
    ("f32", 4, 2, 64, 64, 8, {"attention_chunk": 7}),
    ("f32", 4, 4, 64, 64, 5, {"logits_soft_cap": 0.4, "alibi_slopes": "gen"}),
    ("f32", 4, 1, 64, 64, 16, {"sinks": "gen", "window_left": 3}),
    ("f16", 8, 2, 128, 64, 16, {}),                                      # Dv below Dqk
    ("bf16", 8, 2, 128, 128, 16,
     {"window_left": 9, "attention_chunk": 12, "logits_soft_cap": 1.0, "sinks": "gen"}),
]


@pytest.mark.parametrize("dtype,Hq,Hkv,D,Dv,page_size,kw", PAGED_CASES)
def test_paged_variants(client, dtype, Hq, Hkv, D, Dv, page_size, kw):
    """Chunked prefill, then decode steps, over a paged cache with the variant: each query
    is the last token of its sequence, as the reference's bottom-right alignment has it."""
    for mode in ("prefill", "decode"):
        needs(client, mode, *_fields_of(kw, Dv != D))
    if dtype == "f32" and client.caps.backend != "cpu":
        pytest.skip("f32 page pools: the CUDA backend's paged attention takes f16 and bf16")
    rng = np.random.default_rng(page_size * 13 + D + Dv)
    lens = [0, 0, 0]
    k64 = [np.zeros((0, Hkv, D)) for _ in lens]
    v64 = [np.zeros((0, Hkv, Dv)) for _ in lens]
    with client.paged_kv_cache(num_pages=64, page_size=page_size, num_kv_heads=Hkv,
                               head_dim=D, head_dim_v=Dv, dtype=dtype, max_batch=4,
                               memory="arena") as cache, client.arena(1 << 22) as a:
        assert cache.v_cache.shape == (64, page_size, Hkv, Dv)
        seqs = [cache.add_sequence() for _ in lens]
        for counts in ([5, 17, 1], [3, 11, 9], [1, 1, 1], [1, 1, 1]):
            c = Carver(a)
            N = sum(counts)
            kn, vn = _quantised(rng, (N, Hkv, D), dtype), _quantised(rng, (N, Hkv, Dv), dtype)
            cache.append(seqs, c.put(dtype, kn.astype(np.float32)),
                         c.put(dtype, vn.astype(np.float32)), counts)
            at = 0
            for b, n in enumerate(counts):
                k64[b] = np.concatenate([k64[b], kn[at:at + n]])
                v64[b] = np.concatenate([v64[b], vn[at:at + n]])
                lens[b] += n
                at += n
            decode = counts == [1, 1, 1]
            rows = len(seqs) if decode else N
            q64 = _quantised(rng, (rows, Hq, D), dtype)
            q = c.put(dtype, q64.astype(np.float32))
            out = c.take(dtype, (rows, Hq, Dv))
            args, ref = _variant_tensors(c, kw, Hq, rng)
            if decode:
                cache.decode(seqs, q, out, **args)
            else:
                cache.prefill(seqs, q, out, counts, **args)
            at = 0
            for b, n in enumerate(counts if not decode else [1, 1, 1]):
                want, _ = attention64(q64[at:at + n].transpose(1, 0, 2)[None],
                                      k64[b].transpose(1, 0, 2)[None],
                                      v64[b].transpose(1, 0, 2)[None], causal=True, **ref)
                got = _as64(out[at:at + n], dtype).transpose(1, 0, 2)[None]
                np.testing.assert_allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype],
                                           err_msg=f"sequence {b} of {counts}")
                at += n
        assert lens == [10, 30, 12]


def test_struct_sizes_grew_by_the_variant():
    """Both params structs end with the variant (its alignment padding aside), so a
    library reading `size` sees it."""
    var = ctypes.sizeof(_lib.GllmAttentionVariant)
    for st in (_lib.GllmAttentionParams, _lib.GllmPagedAttentionParams):
        assert st.variant.offset + var == ctypes.sizeof(st)
