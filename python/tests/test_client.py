"""The package against a gllmd of the build tree (CPU backend): connect, status, arenas,
dense attention against float64 numpy, device and shared memory, errors."""
import os
import mmap

import numpy as np
import pytest

import gllm
from refs import attention64

TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def test_connect_caps_status(client, socket_path):
    caps = client.caps
    assert caps.protocol_version == 1
    assert caps.backend in ("cpu", "cuda")     # cpu unless GLLM_TEST_SOCKET names another
    assert caps.ndevices >= 1
    assert set(caps.dtypes) >= {gllm.F32, gllm.F16, gllm.BF16}
    assert caps.share == {"cpu": "memfd", "cuda": "cuda_vmm_fd"}[caps.backend]
    assert caps.share_granularity > 0
    assert client.limits.max_rank == 8
    assert client.devices[0].kind == caps.backend
    with gllm.connect(socket_path) as other:
        st = other.status()
        assert isinstance(st, gllm.Status)
        assert st.backend == caps.backend and st.daemon_version == caps.daemon_version
        assert st.clients >= 2
        assert os.getpid() in {ci.pid for ci in st.listed}
    assert other.closed
    with pytest.raises(gllm.DisconnectedError):
        other.status()


def test_connect_refused(tmp_path):
    with pytest.raises(gllm.Error) as e:
        gllm.connect(str(tmp_path / "nobody.sock"))
    assert e.value.code < 0 and e.value.name


def test_arena_numpy_views(client):
    with client.arena(1 << 16) as a:
        assert a.kind == gllm.MemoryKind.ARENA and a.nbytes >= 1 << 16
        x = a.numpy(np.float32, (4, 8))
        y = a.numpy(np.float32, (32,))
        x[:] = np.arange(32, dtype=np.float32).reshape(4, 8)
        assert np.array_equal(y, np.arange(32, dtype=np.float32))   # one memory, two views
        h = a.numpy(np.float16, (16,), offset=256)
        h[:] = 1.5
        assert a.numpy(np.float16, (16,), offset=256)[3] == np.float16(1.5)
        b = a.numpy(gllm.BF16, (9,), offset=512)
        assert b.dtype == np.uint16
        b[:] = gllm.f32_to_bf16(np.linspace(-2, 2, 9))
        assert np.array_equal(gllm.bf16_to_f32(b), np.linspace(-2, 2, 9, dtype=np.float32))
        with pytest.raises(ValueError):
            a.numpy(np.float32, (1 << 16,))
        t = client.tensor(a, "f32", (4, 8))
        assert np.array_equal(t.numpy(), x)


def test_bf16_helpers_round_to_nearest_even():
    f = np.array([1.0, 1.00390625, 1.01171875, -3.5, np.inf, np.nan], dtype=np.float32)
    b = gllm.f32_to_bf16(f)
    # 1 + 2^-8 is a tie: rounds to the even 1.0; 1 + 3 * 2^-8 rounds up to 1 + 2^-6
    assert list(b[:5]) == [0x3F80, 0x3F80, 0x3F82, 0xC060, 0x7F80]
    assert np.isnan(gllm.bf16_to_f32(b)[5])


class Carver:
    """Tensors one after another in an arena, 64-byte aligned."""

    def __init__(self, mem):
        self.mem, self.off = mem, 0

    def take(self, dtype, shape):
        v = self.mem.numpy(dtype, shape, self.off)
        self.off += -(-v.nbytes // 64) * 64
        return v


def _rand(rng, shape, dtype):
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    if dtype == "bf16":
        bits = gllm.f32_to_bf16(x)
        return bits, gllm.bf16_to_f32(bits)
    x = x.astype(np.float16 if dtype == "f16" else np.float32)
    return x, x.astype(np.float32)


def _store(carver, dtype, data):
    v = carver.take(dtype, data.shape)
    v[:] = data
    return v


@pytest.mark.parametrize("dtype,B,Hq,Hkv,Sq,Skv,D,causal", [
    ("f32", 2, 4, 4, 7, 7, 64, False),
    ("f32", 1, 8, 2, 5, 13, 64, True),      # GQA, causal with Sq < Skv
    ("f16", 2, 4, 1, 9, 9, 128, True),      # MQA
    ("bf16", 1, 6, 2, 16, 16, 64, False),
    ("bf16", 2, 4, 2, 3, 17, 128, True),
])
def test_dense_attention(client, dtype, B, Hq, Hkv, Sq, Skv, D, causal):
    rng = np.random.default_rng(B * 1000 + Hq * 100 + Sq)
    with client.arena(1 << 22) as a:
        c = Carver(a)
        (q, q64), (k, k64), (v, v64) = (_rand(rng, s, dtype) for s in
                                        ((B, Hq, Sq, D), (B, Hkv, Skv, D), (B, Hkv, Skv, D)))
        qa, ka, va = (_store(c, dtype, x) for x in (q, k, v))
        out = c.take(dtype, (B, Hq, Sq, D))
        lse = c.take("f32", (B, Hq, Sq))
        res = client.attention(qa, ka, va, out, causal=causal, lse=lse)
        assert isinstance(res, gllm.JobResult) and res.kernel_ns > 0
        want, want_lse = attention64(q64, k64, v64, causal=causal)
        got = gllm.bf16_to_f32(out) if dtype == "bf16" else out.astype(np.float64)
        np.testing.assert_allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype])
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)
        # scale, through the module-level call that finds the client by the tensors
        gllm.attention(qa, ka, va, out, causal=causal, scale=0.3)
        want, _ = attention64(q64, k64, v64, causal=causal, scale=0.3)
        got = gllm.bf16_to_f32(out) if dtype == "bf16" else out.astype(np.float64)
        np.testing.assert_allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype])
        # repeat: the same result; the job took at least repeat times one run's mean
        out.fill(0)
        res = gllm.attention(qa, ka, va, out, causal=causal, scale=0.3, repeat=5)
        assert res.job_ns >= 5 * res.kernel_ns > 0
        got = gllm.bf16_to_f32(out) if dtype == "bf16" else out.astype(np.float64)
        np.testing.assert_allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype])
        with pytest.raises(gllm.ParamError):
            client.attention(qa, ka, va, out, repeat=101)


def test_bad_shape_raises_with_daemon_message(client):
    with client.arena(1 << 20) as a:
        c = Carver(a)
        q = c.take("f32", (1, 4, 8, 64))
        k = c.take("f32", (1, 3, 8, 64))     # 4 query heads over 3 KV heads
        v = c.take("f32", (1, 3, 8, 64))
        out = c.take("f32", (1, 4, 8, 64))
        with pytest.raises(gllm.ShapeError) as e:
            client.attention(q, k, v, out)
        err = e.value
        assert err.code == gllm.errors.CODES["SHAPE"] and err.name == "GLLM_ESHAPE"
        assert err.message, "the daemon's message is carried"
        assert err.message in str(err)
        assert isinstance(err, gllm.Error) and isinstance(err, ValueError)
        # a failure the library finds itself carries no stale message from the daemon
        with pytest.raises(gllm.Error) as e2:
            client.device_memory(0)
        assert e2.value.name == "EINVAL" and e2.value.message == ""
        # an array outside gllm memory is refused before anything is sent
        with pytest.raises(ValueError):
            client.attention(np.zeros((1, 4, 8, 64), np.float32), k, v, out)


def test_quota_error(client):
    with pytest.raises(gllm.QuotaError) as e:
        client.device_memory(client.limits.max_device_bytes + (1 << 20))
    assert e.value.message


def test_device_memory_copy_and_attention(client):
    rng = np.random.default_rng(7)
    B, H, S, D = 1, 2, 10, 64
    n = B * H * S * D * 4
    with client.arena(1 << 20) as a, client.device_memory(4 * n) as dev:
        assert dev.kind == gllm.MemoryKind.DEVICE and dev.host_address is None
        with pytest.raises(ValueError):
            dev.numpy(np.float32, (4,))
        c = Carver(a)
        host = [_store(c, "f32", rng.uniform(-1, 1, (B, H, S, D)).astype(np.float32))
                for _ in range(3)]
        for i in range(3):
            client.copy(dev, a, n, dst_offset=i * n, src_offset=i * n)
        q, k, v, out = (client.tensor(dev, "f32", (B, H, S, D), i * n) for i in range(4))
        client.attention(q, k, v, out, causal=True)
        back_offset = c.off
        back = c.take("f32", (B, H, S, D))
        client.copy(a, dev, n, dst_offset=back_offset, src_offset=3 * n)
        want, _ = attention64(*host, causal=True)
        np.testing.assert_allclose(back, want, atol=2e-5)


def needs_memfd(client):
    if client.caps.share != "memfd":
        pytest.skip(f"gllmd shares {client.caps.share!r}, not memfds (test_torch covers CUDA)")


def test_shared_memory_memfd(client):
    needs_memfd(client)
    g = client.caps.share_granularity
    rng = np.random.default_rng(3)
    B, H, S, D = 2, 4, 6, 64
    with client.device_memory(1000, shared=True) as m:
        assert m.kind == gllm.MemoryKind.SHARED and m.nbytes % g == 0 and m.nbytes >= 1000
        assert m.map() == m.host_address       # memfd: the host mapping
    with client.device_memory(1 << 20, shared=True) as m:
        c = Carver(m)
        q, k, v = (_store(c, "f16", rng.uniform(-1, 1, (B, H, S, D)).astype(np.float16))
                   for _ in range(3))
        out = c.take("f16", (B, H, S, D))
        client.attention(q, k, v, out)
        want, _ = attention64(q, k, v)
        np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-3, rtol=2e-3)


def test_imported_memfd(client):
    needs_memfd(client)
    g = client.caps.share_granularity
    nbytes = 64 * g if g < 65536 else g
    fd = os.memfd_create("gllm-py-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, nbytes)
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        mm = mmap.mmap(fd, nbytes)
        m = client.import_memory(fd, nbytes)
        assert m.kind == gllm.MemoryKind.SHARED and m.imported
        arr = np.frombuffer(mm, dtype=np.float32)
        B, H, S, D = 1, 2, 4, 64
        n = B * H * S * D
        rng = np.random.default_rng(11)
        arr[:3 * n] = rng.uniform(-1, 1, 3 * n).astype(np.float32)
        q, k, v, out = (client.tensor(m, "f32", (B, H, S, D), i * n * 4) for i in range(4))
        client.attention(q, k, v, out)
        want, _ = attention64(*(arr[i * n:(i + 1) * n].reshape(B, H, S, D) for i in range(3)))
        np.testing.assert_allclose(arr[3 * n:4 * n].reshape(B, H, S, D), want, atol=2e-5)
        m.release()
        del arr
        mm.close()
        # a memfd not sealed against shrinking is refused, by name
        fd2 = os.memfd_create("gllm-py-unsealed", os.MFD_CLOEXEC)
        os.ftruncate(fd2, nbytes)
        with pytest.raises(gllm.NotExportError) as e:
            client.import_memory(fd2, nbytes)
        assert e.value.name == "GLLM_EUNSEALED"
        os.close(fd2)
    finally:
        os.close(fd)


def test_release_is_idempotent_and_gc_releases(client):
    before = client.status().arenas
    a = client.arena(4096)
    view = a.numpy(np.int32, (16,))
    del a                                   # the view keeps the arena alive
    view[:] = 5
    assert client.status().arenas == before + 1
    del view
    import gc
    gc.collect()
    assert client.status().arenas == before
    b = client.arena(4096)
    b.release()
    b.release()
