"""float64 numpy references for attention, dense and paged, with the variants exactly as
include/gllm/gllm.h's comment on gllm_attention_variant defines them."""
import numpy as np


def attention64(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1,
                attention_chunk=0, logits_soft_cap=0.0, alibi_slopes=None, sinks=None):
    """q [B, Hq, Sq, Dqk], k [B, Hkv, Skv, Dqk], v [B, Hkv, Skv, Dv]: out [B, Hq, Sq, Dv]
    and lse [B, Hq, Sq].

    Query row r is at position i = r + Skv - Sq (bottom-right aligned); it sees key j when
    every mask given allows it: causal j <= i; window i - window_left <= j (unless -1) and
    j <= i + window_right (unless -1); chunk c > 0: i // c == j // c. A visible key's score
    is s = scale * q.k, then cap * tanh(s / cap) (cap > 0), then + slope[h] * (j - i). With
    sinks a virtual key of logit sinks[h] (not scaled) and value zero joins the softmax. A
    row seeing no key is zeros with lse -inf (sinks[h] with sinks)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    k = np.repeat(k, g, axis=1)
    v = np.repeat(v, g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * (1 / np.sqrt(D) if scale is None else scale)
    i = np.arange(Sq)[:, None] + Skv - Sq
    j = np.arange(Skv)[None, :]
    visible = np.ones((Sq, Skv), dtype=bool)
    if causal:
        visible &= j <= i
    if window_left != -1:
        visible &= i - window_left <= j
    if window_right != -1:
        visible &= j <= i + window_right
    if attention_chunk:
        visible &= (i // attention_chunk) == (j // attention_chunk)
    if logits_soft_cap:
        s = logits_soft_cap * np.tanh(s / logits_soft_cap)
    if alibi_slopes is not None:
        slopes = np.asarray(alibi_slopes, dtype=np.float64).reshape(Hq)
        s = s + slopes[None, :, None, None] * (j - i)[None, None]
    s = np.where(visible, s, -np.inf)
    if sinks is not None:
        sink = np.broadcast_to(np.asarray(sinks, dtype=np.float64).reshape(1, Hq, 1, 1),
                               (B, Hq, Sq, 1))
        s = np.concatenate([s, sink], axis=-1)
        v = np.concatenate([v, np.zeros(v.shape[:2] + (1, v.shape[3]))], axis=2)
    m = s.max(axis=-1, keepdims=True)
    empty = np.isneginf(m)                       # no key, and no sink either
    m = np.where(empty, 0.0, m)
    p = np.exp(s - m)                            # exp(-inf) = 0 for the masked keys
    denom = p.sum(axis=-1, keepdims=True)
    out = np.einsum("bhqk,bhkd->bhqd", p / np.where(empty, 1.0, denom), v)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, denom)))
    return out, lse[..., 0]
