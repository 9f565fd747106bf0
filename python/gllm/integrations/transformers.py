"""Hugging Face transformers' attention through gllmd: register() makes "gllm" an
attn_implementation, so that a model's every attention call (prefill and decode, GQA, its
scale, sliding windows, soft-caps and sinks) runs as one gllm dense attention job.

    import gllm.integrations.transformers as gllm_hf
    gllm_hf.register()                       # or register(client)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="gllm")

Tensors are staged: each call copies Q, K and V into gllm-shared memory and the output back
(Client.torch_tensor), so it costs four copies a layer; docs/python.md says when that matters.
A call gllm cannot compute raises GllmUnsupported naming what is missing (an explicit mask,
padding, dropout); nothing falls back to another kernel.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Dict, Optional, Tuple

from ..client import Client, connect

NAME = "gllm"


class GllmUnsupported(NotImplementedError):
    """A transformers attention call that gllm cannot compute as asked."""


class _Staging:
    """One client's gllm-shared buffers, a flat one per dtype, device and slot (the job's
    tensors, the sinks), grown on demand; each call carves its tensors from the start of it
    (calls of one client are serial)."""

    def __init__(self, client: Client):
        self.client = client
        self._flat: Dict[Tuple[Any, Any], Any] = {}

    def take(self, dtype: Any, device: Any, shapes: Tuple[Tuple[int, ...], ...],
             slot: str = "io") -> list:
        need = sum(math.prod(s) for s in shapes)
        key = (dtype, str(device), slot)
        flat = self._flat.get(key)
        if flat is None or flat.numel() < need:
            # 1.5x: a decode's cache grows by one token a step, not one allocation a step
            size = max(need + need // 2, 1 << 16)
            flat = self.client.torch_tensor((size,), dtype, device)
            self._flat[key] = flat
        out, at = [], 0
        for s in shapes:
            n = math.prod(s)
            out.append(flat[at:at + n].view(s))
            at += n
        return out


_state: Dict[str, Any] = {"client": None, "staging": None}
_lock = threading.Lock()


def _staging() -> _Staging:
    st = _state["staging"]
    if st is None:
        raise RuntimeError("gllm.integrations.transformers: call register() first")
    return st


def _mask_none(*args: Any, **kwargs: Any) -> None:
    """The mask function of attn_implementation "gllm": gllm computes causality and windows
    itself, so no mask tensor is built. A padding mask cannot be honoured: refused."""
    am = kwargs.get("attention_mask")
    if am is not None and not bool((am != 0).all()):
        raise GllmUnsupported("gllm: padded batches (an attention_mask with zeros) are not "
                              "supported: run one sequence per call or equal lengths")
    return None


def attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                      scaling: Optional[float] = None, dropout: float = 0.0,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      s_aux: Any = None, **kwargs: Any) -> Tuple[Any, None]:
    """transformers' attention interface: query [B, Hq, Sq, D], key and value [B, Hkv, Skv,
    D] (not repeated), returns ([B, Sq, Hq, Dv], None). Positions are aligned bottom-right,
    as transformers' cache gives them (the queries are the last Sq of Skv positions)."""
    if attention_mask is not None:
        raise GllmUnsupported("gllm: an explicit attention mask tensor (gllm computes causal "
                              "and sliding-window masks itself; register() installs a mask "
                              "function that builds none)")
    if dropout and module.training:
        raise GllmUnsupported(f"gllm: attention dropout ({dropout}) in training mode")
    B, Hq, Sq, D = query.shape
    Hkv, Skv, Dv = key.shape[1], key.shape[2], value.shape[-1]
    causal = bool(getattr(module, "is_causal", True))
    st = _staging()
    dt = query.dtype
    q, k, v, out = st.take(dt, query.device, ((B, Hq, Sq, D), (B, Hkv, Skv, D),
                                             (B, Hkv, Skv, Dv), (B, Hq, Sq, Dv)))
    q.copy_(query)                 # copy_ makes them contiguous and of dtype dt
    k.copy_(key)
    v.copy_(value)
    kw: Dict[str, Any] = {}
    if sliding_window:
        # transformers' window: key j is seen from query i when i - j < sliding_window
        kw["window_left"] = int(sliding_window) - 1
    if softcap:
        kw["logits_soft_cap"] = float(softcap)
    if s_aux is not None:
        kw["sinks"] = _sinks(st, s_aux, Hq, query.device)
    st.client.attention(q, k, v, out, causal=causal,
                        scale=float(scaling) if scaling is not None else None, **kw)
    return out.transpose(1, 2).contiguous(), None


def _sinks(st: _Staging, s_aux: Any, Hq: int, device: Any) -> Any:
    import torch
    # f32 of its own (the flat buffers are per dtype); a parameter, copied each call
    buf, = st.take(torch.float32, device, ((Hq,),), slot="sinks")
    buf.copy_(s_aux.detach().reshape(Hq))   # copy_ converts the dtype
    return buf


def use(client: Client) -> None:
    """The client attention_forward sends its jobs through (register() calls it)."""
    with _lock:
        _state["client"], _state["staging"] = client, _Staging(client)


def register(client: Optional[Client] = None, socket: Optional[str] = None) -> str:
    """Adds "gllm" to transformers' AttentionInterface (and its mask interface, where the
    version has one) using client (or a new connection to socket, or the default one).
    Returns the name to pass as attn_implementation."""
    from transformers import AttentionInterface
    use(client or connect(socket))
    AttentionInterface.register(NAME, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:
        pass
    else:
        AttentionMaskInterface.register(NAME, _mask_none)
    return NAME
