"""The torch path: tensors in gllmd-shared memory handed to attention as they are. Skipped
without torch. Against the CPU backend (memfd) the tensors are CPU tensors; against a CUDA
gllmd (GLLM_TEST_SOCKET=... on the GPU machine) they are CUDA tensors made through
__cuda_array_interface__, and the test needs torch with CUDA."""
import gc

import pytest

import gllm

torch = pytest.importorskip("torch")

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture
def tclient(client):
    share = client.caps.share
    if share == "cuda_vmm_fd" and not torch.cuda.is_available():
        pytest.skip("gllmd shares CUDA memory but this torch has no CUDA")
    if share not in ("memfd", "cuda_vmm_fd"):
        pytest.skip(f"gllmd shares no memory (share {share!r})")
    return client


def _expected_device(client):
    return "cuda" if client.caps.share == "cuda_vmm_fd" else "cpu"


def ref(q, k, v, causal):
    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        Sq, Skv = q.shape[2], k.shape[2]
        mask = torch.arange(Skv)[None, :] <= torch.arange(Sq)[:, None] + Skv - Sq
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_attention(tclient, dtype):
    B, Hq, Hkv, S, D = 2, 8, 2, 33, 128
    torch.manual_seed(0)
    q, k, v = (tclient.torch_tensor(shape, dtype) for shape in
               ((B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    out = tclient.torch_tensor((B, Hq, S, D), dtype)
    assert q.device.type == _expected_device(tclient) and q.dtype == dtype
    for t in (q, k, v):
        t.copy_(torch.rand(t.shape, dtype=torch.float32, device=t.device) * 2 - 1)
    gllm.attention(q, k, v, out, causal=True)   # the module-level call finds the client
    want = ref(q, k, v, True)
    got = out.to("cpu", torch.float64)
    assert torch.allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype]), \
        (got - want).abs().max().item()


def test_torch_tensor_keeps_its_memory(tclient):
    base = tclient.status()
    t = tclient.torch_tensor((1024,), torch.float32)
    view = t[10:20]
    del t
    gc.collect()
    view.fill_(3.0)                              # still mapped: the view holds the memory
    assert tclient.status().device_bytes > base.device_bytes
    del view
    gc.collect()
    assert tclient.status().device_bytes == base.device_bytes


def test_torch_paged_decode(tclient):
    dtype, Hq, Hkv, D, ps = torch.bfloat16, 8, 2, 128, 16
    cache = tclient.paged_kv_cache(num_pages=32, page_size=ps, num_kv_heads=Hkv, head_dim=D,
                                   dtype=dtype, max_batch=4, memory="shared")
    seqs = [cache.add_sequence() for _ in range(2)]
    lens = [19, 40]
    k = tclient.torch_tensor((sum(lens), Hkv, D), dtype)
    v = tclient.torch_tensor((sum(lens), Hkv, D), dtype)
    k.copy_(torch.randn(k.shape, device=k.device))
    v.copy_(torch.randn(v.shape, device=v.device))
    cache.append(seqs, k, v, lens)
    q = tclient.torch_tensor((2, Hq, D), dtype)
    q.copy_(torch.randn(q.shape, device=q.device))
    out = tclient.torch_tensor((2, Hq, D), dtype)
    cache.decode(seqs, q, out, stream=torch.cuda.current_stream() if q.is_cuda else None)
    at = 0
    for b, n in enumerate(lens):
        ks = k[at:at + n].transpose(0, 1)[None]
        vs = v[at:at + n].transpose(0, 1)[None]
        want = ref(q[b][None, :, None], ks, vs, False)[0, :, 0]
        got = out[b].to("cpu", torch.float64)
        assert torch.allclose(got, want, atol=1.6e-2, rtol=1.6e-2)
        at += n
    cache.release()


def test_torch_ordered_on_the_stream(tclient):
    """On CUDA the job waits on the GPU for the stream's producers, however late they run,
    and the stream's consumers wait for the job: nothing synchronises on the host."""
    if not (tclient.caps.share == "cuda_vmm_fd" and tclient.ordered):
        pytest.skip("gllmd does not order jobs on CUDA streams")
    B, Hq, Hkv, S, D, dtype = 1, 8, 2, 64, 128, torch.float16
    q, k, v = (tclient.torch_tensor(shape, dtype) for shape in
               ((B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    out = tclient.torch_tensor((B, Hq, S, D), dtype)
    for t in (q, k, v, out):
        t.fill_(float("nan"))                    # what gllmd would read if it ran early
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)               # the producers start tens of ms from now
    g = torch.Generator(device="cuda").manual_seed(3)
    for t in (q, k, v):
        t.copy_(torch.rand(t.shape, generator=g, device="cuda", dtype=torch.float32) * 2 - 1)
    job = gllm.attention(q, k, v, out)
    assert isinstance(job, gllm.Job) and not job.done()
    got = (out.float() * 1.0).to("cpu", torch.float64)   # a consumer on the stream
    want = ref(q, k, v, False)
    assert torch.allclose(got, want, atol=TOL[dtype], rtol=TOL[dtype])
    assert job.result().kernel_ns > 0
    # A job gllmd refuses (out's dtype is not the inputs'): the error comes with its reply,
    # and the stream, which waits for the refused job's signal, still goes on (gllmd writes
    # it after the connection's earlier jobs all the same).
    wrong = tclient.torch_tensor((B, Hq, S, D), torch.bfloat16)
    job = gllm.attention(q, k, v, wrong)
    with pytest.raises(gllm.DTypeError):
        job.result()
    torch.cuda.current_stream().synchronize()
    tclient.synchronize()


def test_torch_variants(tclient):
    """The variant keywords with torch tensors: slopes and sinks in shared memory too, and
    out's head dim v's (below q's)."""
    from refs import attention64
    from test_variants import needs
    needs(tclient, "dense", "window", "logits_soft_cap", "alibi_slopes", "sinks", "head_dim_v")
    B, Hq, Hkv, Sq, Skv, D, Dv, dtype = 1, 4, 2, 12, 20, 128, 64, torch.float16
    torch.manual_seed(4)
    q, k, v = (tclient.torch_tensor(shape, dtype) for shape in
               ((B, Hq, Sq, D), (B, Hkv, Skv, D), (B, Hkv, Skv, Dv)))
    out = tclient.torch_tensor((B, Hq, Sq, Dv), dtype)
    slopes, sinks = (tclient.torch_tensor((Hq,), torch.float32) for _ in range(2))
    for t in (q, k, v):
        t.copy_(torch.rand(t.shape, dtype=torch.float32, device=t.device) * 2 - 1)
    slopes.copy_(torch.tensor([0.5, 0.25, 0.125, 0.0625]))
    sinks.copy_(torch.tensor([1.0, -1.0, 0.5, 2.0]))
    kw = dict(window_left=7, logits_soft_cap=1.5)
    res = gllm.attention(q, k, v, out, causal=True, alibi_slopes=slopes, sinks=sinks, **kw)
    if isinstance(res, gllm.Job):
        res.result()
    want, _ = attention64(*(x.to("cpu", torch.float64).numpy() for x in (q, k, v)),
                          causal=True, alibi_slopes=slopes.cpu().double().numpy(),
                          sinks=sinks.cpu().double().numpy(), **kw)
    got = out.to("cpu", torch.float64)
    assert got.shape == (B, Hq, Sq, Dv)
    assert torch.allclose(got, torch.from_numpy(want), atol=2e-3, rtol=2e-3), \
        (got - torch.from_numpy(want)).abs().max().item()
