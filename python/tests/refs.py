"""float64 numpy references for attention, dense and paged."""
import numpy as np


def attention64(q, k, v, causal=False, scale=None):
    """q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D]: out [B, Hq, Sq, D] and lse [B, Hq, Sq]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    k = np.repeat(k, g, axis=1)
    v = np.repeat(v, g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * (1 / np.sqrt(D) if scale is None else scale)
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Skv)[None, :]
        s = np.where(j <= i + Skv - Sq, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    denom = p.sum(axis=-1, keepdims=True)
    out = np.einsum("bhqk,bhkd->bhqd", p / denom, v)
    return out, (m + np.log(denom))[..., 0]
