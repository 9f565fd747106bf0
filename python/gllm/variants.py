"""Attention variants (sliding window, chunked attention, logit soft-cap, ALiBi, sinks) as
gllm_attention_variant, and what each mode computes (gllm_mode_caps)."""
from __future__ import annotations

import ctypes
import dataclasses
import operator
from typing import Any, Callable, FrozenSet, Tuple

from . import _lib, errors
from .connection import Connection

# enum gllm_mode by the names the package uses
MODES = {"dense": _lib.MODE_DENSE, "decode": _lib.MODE_DECODE, "prefill": _lib.MODE_PREFILL}
_MODE_NAMES = {v: k for k, v in MODES.items()}

# GLLM_VARIANT_* bits by the keyword (or, for head_dim_v, the shape) that uses them
VARIANT_NAMES = {
    _lib.VARIANT_WINDOW: "window",                 # window_left, window_right
    _lib.VARIANT_CHUNK: "attention_chunk",
    _lib.VARIANT_SOFT_CAP: "logits_soft_cap",
    _lib.VARIANT_ALIBI: "alibi_slopes",
    _lib.VARIANT_SINKS: "sinks",
    _lib.VARIANT_HEAD_DIM_V: "head_dim_v",         # v's head dim below q's and k's
}

_EOPNOTSUPP = -95
_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT32 = (0, (1 << 32) - 1)


@dataclasses.dataclass(frozen=True)
class ModeCaps:
    """What the daemon's backend computes in one mode ("dense", "decode", "prefill"), as
    hello announced it: the variant fields (names from VARIANT_NAMES) and the head dims of
    q and k: one of head_dims when it is not empty, else 1 .. max_head_dim."""
    mode: str
    variants: FrozenSet[str]
    max_head_dim: int
    head_dims: Tuple[int, ...]

    def head_dim_ok(self, d: int) -> bool:
        """Whether q's and k's head dim d is one the mode takes."""
        return d in self.head_dims if self.head_dims else 1 <= d <= self.max_head_dim


def mode_number(mode: Any) -> int:
    """enum gllm_mode from a name ("dense", "decode", "prefill") or the number itself."""
    if isinstance(mode, str):
        try:
            return MODES[mode]
        except KeyError:
            raise ValueError(f"mode must be one of {sorted(MODES)}, not {mode!r}") from None
    n = operator.index(mode)
    if n not in _MODE_NAMES:
        raise ValueError(f"mode {n} is not in gllm_mode (0 .. {_lib.MODE_COUNT - 1})")
    return n


def mode_caps(conn: Connection, mode: Any, max_head_dim: Callable[[], int]) -> ModeCaps:
    """gllm_client_mode_caps. A library from before it computes no variant: the header's
    answer for a daemon from before them (no variants, the limits' head dim) is given."""
    n = mode_number(mode)
    if not _lib.has("gllm_client_mode_caps"):
        return ModeCaps(_MODE_NAMES[n], frozenset(), max_head_dim(), ())
    mc = _lib.sized(_lib.GllmModeCaps)
    conn.call("gllm_client_mode_caps", n, ctypes.byref(mc))
    names = frozenset(name for bit, name in VARIANT_NAMES.items() if mc.variants & bit)
    count = max(0, min(mc.nhead_dims, _lib.MAX_MODE_HEAD_DIMS))
    return ModeCaps(_MODE_NAMES[n], names, mc.max_head_dim, tuple(mc.head_dims[:count]))


def _int_in(name: str, value: Any, bounds: Tuple[int, int]) -> int:
    # ctypes would wrap an out-of-range value silently into a different, valid-looking one
    v = operator.index(value)
    if not bounds[0] <= v <= bounds[1]:
        raise ValueError(f"{name} = {v} does not fit the C field ({bounds[0]} .. {bounds[1]})")
    return v


def set_variant(p: Any, struct_of: Callable[[Any], Tuple[Any, bool]], call: str,
                window_left: int = -1, window_right: int = -1, attention_chunk: int = 0,
                logits_soft_cap: float = 0.0, alibi_slopes: Any = None,
                sinks: Any = None) -> bool:
    """Fills p.variant (and GLLM_ATTN_WINDOW in p.flags) from the keywords, the tensors
    named through struct_of; returns whether one of them is a torch CUDA tensor. The
    library checks the values and the mode's caps when the job is submitted."""
    # No variant, the usual case, costs a serving loop's call no conversions.
    if window_left == -1 and window_right == -1 and not attention_chunk and \
            not logits_soft_cap and alibi_slopes is None and sinks is None:
        return False
    wl = _int_in("window_left", window_left, _INT32)
    wr = _int_in("window_right", window_right, _INT32)
    chunk = _int_in("attention_chunk", attention_chunk, _UINT32)
    cap = float(logits_soft_cap)
    window = wl != -1 or wr != -1
    if not _lib.has("gllm_client_check_variant"):
        # An older library sends no variant: the job would run as full attention.
        raise errors.from_code(_EOPNOTSUPP, call, f"{_lib.library_path()} predates attention "
                               "variants (gllm_client_check_variant): none is sent")
    var = p.variant
    if window:
        p.flags |= _lib.ATTN_WINDOW
        var.window_left, var.window_right = wl, wr
    var.attention_chunk = chunk
    var.logits_soft_cap = cap
    any_cuda = False
    for name, x in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if x is not None:
            st, cuda = struct_of(x)
            any_cuda |= cuda
            setattr(var, name, st)
    return any_cuda
