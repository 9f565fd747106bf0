"""gllm.integrations.transformers' attention function against a float64 reference, called as
transformers calls it (no transformers needed): GQA, causal prefill and decode with the
cache's bottom-right positions, sliding windows, soft-caps, sinks, and the refusals."""
import math

import pytest

from gllm.integrations import transformers as hf

torch = pytest.importorskip("torch")


class Module:
    """What the adapter reads of a transformers attention module."""
    is_causal = True
    training = False


@pytest.fixture
def adapter(client):
    if client.caps.share == "cuda_vmm_fd" and not torch.cuda.is_available():
        pytest.skip("gllmd shares CUDA memory but this torch has no CUDA")
    if client.caps.share not in ("memfd", "cuda_vmm_fd"):
        pytest.skip(f"gllmd shares no memory (share {client.caps.share!r})")
    hf.use(client)
    return "cuda" if client.caps.share == "cuda_vmm_fd" else "cpu"


def reference(q, k, v, scale, window=None, cap=None, sinks=None):
    """float64 [B, Sq, Hq, D]: the last Sq of Skv positions, causal."""
    q, k, v = (x.to("cpu", torch.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    g = Hq // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    Skv = k.shape[2]
    s = (q @ k.transpose(-1, -2)) * scale
    if cap:
        s = cap * torch.tanh(s / cap)
    i = torch.arange(Sq)[:, None] + Skv - Sq
    j = torch.arange(Skv)[None, :]
    seen = j <= i
    if window:
        seen &= i - j < window
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        col = sinks.to(torch.float64).view(1, Hq, 1, 1).expand(B, Hq, Sq, 1)
        p = torch.softmax(torch.cat([s, col], -1), -1)[..., :-1]
    else:
        p = torch.softmax(s, -1)
    return (p @ v).transpose(1, 2)


CASES = [
    # B, Hq, Hkv, Sq, Skv, D, sliding_window, softcap, sinks
    (1, 8, 2, 70, 70, 64, None, None, False),      # Llama: GQA prefill
    (2, 4, 4, 90, 90, 128, 32, None, False),       # Mistral: a window
    (1, 4, 2, 60, 60, 256, 16, 50.0, False),       # Gemma 2's local layer
    (1, 4, 2, 1, 45, 256, 16, 50.0, False),        # ... decoding from its cache
    (1, 8, 2, 50, 50, 64, 20, None, True),         # GPT-OSS: window and sinks
    (2, 8, 2, 1, 77, 64, None, None, True),        # ... decoding, a global layer
    (1, 6, 6, 3, 40, 96, None, None, False),       # Phi-3: several new tokens
]


@pytest.mark.parametrize("case", CASES)
def test_attention_forward(adapter, case):
    B, Hq, Hkv, Sq, Skv, D, window, cap, with_sinks = case
    torch.manual_seed(Sq * 7 + D)
    dev, dt = adapter, torch.bfloat16
    # transformers' layout: [B, H, S, D] views of [B, S, H, D] projections (not contiguous)
    q = torch.randn(B, Sq, Hq, D).to(dev, dt).transpose(1, 2)
    k = torch.randn(B, Skv, Hkv, D).to(dev, dt).transpose(1, 2)
    v = torch.randn(B, Skv, Hkv, D).to(dev, dt).transpose(1, 2)
    if cap:
        q = q * 0.6 * cap    # scores near the cap, so that it changes the result
    sinks = torch.rand(Hq) * 4 - 1 if with_sinks else None
    scale = 1 / math.sqrt(D)
    out, weights = hf.attention_forward(Module(), q, k, v, None, scaling=scale,
                                        sliding_window=window, softcap=cap,
                                        s_aux=sinks.to(dev) if sinks is not None else None)
    assert weights is None and out.shape == (B, Sq, Hq, D) and out.dtype == dt
    want = reference(q, k, v, scale, window, cap, sinks)
    err = (out.to("cpu", torch.float64) - want).abs().max().item()
    assert err < 2e-2, err
    # the same without the variant differs (the check can tell it was applied)
    if window or cap or with_sinks:
        plain = reference(q, k, v, scale)
        assert (plain - want).abs().max().item() > 5 * err


def test_refusals(adapter):
    dev = adapter
    q = torch.zeros(1, 2, 4, 64, device=dev, dtype=torch.bfloat16)
    mask = torch.zeros(1, 1, 4, 4, device=dev)
    with pytest.raises(hf.GllmUnsupported, match="mask"):
        hf.attention_forward(Module(), q, q, q, mask)
    training = Module()
    training.training = True
    with pytest.raises(hf.GllmUnsupported, match="dropout"):
        hf.attention_forward(training, q, q, q, None, dropout=0.1)
    with pytest.raises(hf.GllmUnsupported, match="padded"):
        hf._mask_none(attention_mask=torch.tensor([[0, 1, 1]]))
    assert hf._mask_none(attention_mask=torch.ones(1, 3)) is None
