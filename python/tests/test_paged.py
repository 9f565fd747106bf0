"""PagedKVCache against float64 numpy: appends in chunks, chunked prefill and decode over
pools in device, shared and arena memory."""
import numpy as np
import pytest

import gllm
from refs import attention64

TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def _rand(rng, shape, dtype):
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    if dtype == "bf16":
        bits = gllm.f32_to_bf16(x)
        return bits, gllm.bf16_to_f32(bits).astype(np.float64)
    x = x.astype(np.float16 if dtype == "f16" else np.float32)
    return x, x.astype(np.float64)


def _as64(x, dtype):
    return gllm.bf16_to_f32(x).astype(np.float64) if dtype == "bf16" else x.astype(np.float64)


class Run:
    """A cache, an arena for the step's tensors, and the float64 truth of every sequence."""

    def __init__(self, client, dtype, Hq, Hkv, D, page_size, memory, nseq):
        self.c, self.dtype, self.Hq, self.Hkv, self.D = client, dtype, Hq, Hkv, D
        self.cache = client.paged_kv_cache(num_pages=96, page_size=page_size,
                                           num_kv_heads=Hkv, head_dim=D, dtype=dtype,
                                           max_batch=8, memory=memory)
        self.arena = client.arena(1 << 22)
        self.rng = np.random.default_rng(page_size * 7 + Hq)
        self.seqs = [self.cache.add_sequence() for _ in range(nseq)]
        self.k64 = {s: np.zeros((0, Hkv, D)) for s in self.seqs}
        self.v64 = {s: np.zeros((0, Hkv, D)) for s in self.seqs}
        self.stored = {}            # (seq, position) -> k row as stored

    def views(self, *shapes):
        off, out = 0, []
        for dtype, shape in shapes:
            v = self.arena.numpy(dtype, shape, off)
            off += -(-v.nbytes // 64) * 64
            out.append(v)
        return out

    def append(self, counts):
        N = sum(counts)
        (k, k64), (v, v64) = (_rand(self.rng, (N, self.Hkv, self.D), self.dtype) for _ in "kv")
        ka, va = self.views((self.dtype, k.shape), (self.dtype, v.shape))
        ka[:], va[:] = k, v
        self.cache.append(self.seqs, ka, va, counts)
        at = 0
        for s, n in zip(self.seqs, counts):
            for i in range(n):
                self.stored[(s, len(self.k64[s]) + i)] = k[at + i].copy()
            self.k64[s] = np.concatenate([self.k64[s], k64[at:at + n]])
            self.v64[s] = np.concatenate([self.v64[s], v64[at:at + n]])
            at += n

    def prefill(self, counts):
        N = sum(counts)
        q, q64 = _rand(self.rng, (N, self.Hq, self.D), self.dtype)
        # q, out and the cache's own table live in different arenas: q and out here
        qa, out = self.views((self.dtype, q.shape), (self.dtype, q.shape))
        qa[:] = q
        self.cache.prefill(self.seqs, qa, out, counts)
        at = 0
        for s, n in zip(self.seqs, counts):
            qs = q64[at:at + n].transpose(1, 0, 2)[None]             # [1, Hq, n, D]
            want, _ = attention64(qs, self.k64[s].transpose(1, 0, 2)[None],
                                  self.v64[s].transpose(1, 0, 2)[None], causal=True)
            got = _as64(out[at:at + n], self.dtype).transpose(1, 0, 2)[None]
            np.testing.assert_allclose(got, want, atol=TOL[self.dtype], rtol=TOL[self.dtype])
            at += n

    def decode(self):
        B = len(self.seqs)
        q, q64 = _rand(self.rng, (B, self.Hq, self.D), self.dtype)
        qa, out = self.views((self.dtype, q.shape), (self.dtype, q.shape))
        qa[:] = q
        self.cache.decode(self.seqs, qa, out)
        for b, s in enumerate(self.seqs):
            want, _ = attention64(q64[b][None, :, None], self.k64[s].transpose(1, 0, 2)[None],
                                  self.v64[s].transpose(1, 0, 2)[None])
            got = _as64(out[b], self.dtype)[None, :, None]
            np.testing.assert_allclose(got, want, atol=TOL[self.dtype], rtol=TOL[self.dtype])

    def check_pool(self):
        """Host-visible pools hold each token's K at its page and slot."""
        pool = self.cache.k_cache.numpy()
        ps = self.cache.page_size
        for (s, pos), row in self.stored.items():
            page = self.cache.pages(s)[pos // ps]
            assert np.array_equal(pool[page, pos % ps], row), (s, pos)

    def close(self):
        self.cache.release()
        self.arena.release()


def _f32_pools_supported(client, dtype="f32"):
    """The CUDA backend's paged attention takes f16 and bf16 only (docs/PROTOCOL.md)."""
    if dtype == "f32" and client.caps.backend != "cpu":
        pytest.skip("f32 page pools: the CUDA backend's paged attention takes f16 and bf16; "
                    "the f16 and bf16 cases cover it")


@pytest.mark.parametrize("dtype,Hq,Hkv,D,page_size,memory", [
    ("f32", 4, 4, 64, 16, "device"),
    ("f16", 8, 2, 64, 16, "shared"),
    ("bf16", 8, 1, 128, 5, "arena"),
    ("f16", 4, 2, 128, 1, "device"),
])
def test_append_prefill_decode(client, dtype, Hq, Hkv, D, page_size, memory):
    _f32_pools_supported(client, dtype)
    r = Run(client, dtype, Hq, Hkv, D, page_size, memory, nseq=3)
    try:
        r.append([3, 20, 16])          # first chunk: prefill of the prompts' start
        r.prefill([3, 20, 16])
        r.append([4, 13, 1])           # second chunk: from inside a partial page
        r.prefill([4, 13, 1])
        for _ in range(3):             # decode steps
            r.append([1, 1, 1])
            r.decode()
        assert [r.cache.length(s) for s in r.seqs] == [10, 36, 20]
        if r.cache.k_cache.memory.host_address is not None:
            r.check_pool()
    finally:
        r.close()


def test_pages_are_reused_and_errors_roll_back(client):
    _f32_pools_supported(client)
    r = Run(client, "f32", 4, 2, 64, 4, "arena", nseq=2)
    try:
        start = r.cache.free_pages
        r.append([6, 9])
        assert r.cache.free_pages == start - 2 - 3
        r.cache.free_sequence(r.seqs[0])
        assert r.cache.free_pages == start - 3
        r.seqs[0] = r.cache.add_sequence()
        r.k64[r.seqs[0]] = np.zeros((0, 2, 64))
        r.v64[r.seqs[0]] = np.zeros((0, 2, 64))
        r.stored = {}
        r.append([2, 1])
        r.decode()
        r.check_pool()
        # decoding an empty sequence: refused by gllmd, naming it
        empty = r.cache.add_sequence()
        q, out = r.views(("f32", (1, 4, 64)), ("f32", (1, 4, 64)))
        with pytest.raises(gllm.ShapeError) as e:
            r.cache.decode([empty], q, out)
        assert e.value.message
        # an append gllmd refuses (k of the wrong head count) leaves the lengths as they were
        before = r.cache.free_pages
        k, v = r.views(("f32", (3, 3, 64)), ("f32", (3, 3, 64)))
        with pytest.raises(gllm.Error):
            r.cache.append([empty], k, v, [3])
        assert r.cache.length(empty) == 0 and r.cache.free_pages == before
        # a pool too small for the tokens: no job at all
        k, v = r.views(("f32", (1000, 2, 64)), ("f32", (1000, 2, 64)))
        with pytest.raises(MemoryError):
            r.cache.append([empty], k, v, [1000])
        assert r.cache.free_pages == before
    finally:
        r.close()


def test_layers_share_one_table_per_step(client):
    _f32_pools_supported(client)
    """Two layers, one step() each: per-layer pools hold different K/V, one page table; the
    second layer appends and attends in one run (append_attention_step)."""
    Hq, Hkv, D, ps, L = 4, 2, 64, 8, 2
    rng = np.random.default_rng(5)
    with client.paged_kv_cache(num_pages=32, page_size=ps, num_kv_heads=Hkv, head_dim=D,
                               dtype="f32", max_batch=4, memory="shared",
                               num_layers=L) as cache, client.arena(1 << 20) as a:
        seqs = [cache.add_sequence() for _ in range(2)]
        k64 = [[np.zeros((0, Hkv, D))] * 2 for _ in range(L)]
        v64 = [[np.zeros((0, Hkv, D))] * 2 for _ in range(L)]
        off = 0

        def view(shape):
            nonlocal off
            x = a.numpy("f32", shape, off)
            off = (off + x.nbytes + 63) // 64 * 64
            return x
        for counts in ([5, 11], [1, 1], [1, 1]):
            cache.step(seqs, counts)
            N = sum(counts)
            off = 0
            for layer in range(L):
                k, v = view((N, Hkv, D)), view((N, Hkv, D))
                k[:] = rng.uniform(-1, 1, k.shape)
                v[:] = rng.uniform(-1, 1, v.shape)
                prompts = counts[0] > 1            # the prompts: chunked prefill
                rows = N if prompts else 2
                q, out = view((rows, Hq, D)), view((rows, Hq, D))
                q[:] = rng.uniform(-1, 1, q.shape)
                if layer == 1:                     # the append and the attention as one run
                    cache.append_attention_step(layer, k, v, q, out, decode=not prompts)
                else:
                    cache.append_step(layer, k, v)
                    (cache.prefill_step if prompts else cache.decode_step)(layer, q, out)
                at = 0
                for b, n in enumerate(counts):
                    k64[layer][b] = np.concatenate([k64[layer][b], k[at:at + n]])
                    v64[layer][b] = np.concatenate([v64[layer][b], v[at:at + n]])
                    at += n
                if prompts:
                    at = 0
                    for b, n in enumerate(counts):
                        want, _ = attention64(q[at:at + n].transpose(1, 0, 2)[None],
                                              k64[layer][b].transpose(1, 0, 2)[None],
                                              v64[layer][b].transpose(1, 0, 2)[None], causal=True)
                        np.testing.assert_allclose(out[at:at + n].transpose(1, 0, 2)[None], want,
                                                   atol=2e-5)
                        at += n
                    continue
                for b in range(2):
                    want, _ = attention64(q[b][None, :, None],
                                          k64[layer][b].transpose(1, 0, 2)[None],
                                          v64[layer][b].transpose(1, 0, 2)[None])
                    np.testing.assert_allclose(out[b][None, :, None], want, atol=2e-5)
        assert [cache.length(s) for s in seqs] == [7, 13]
