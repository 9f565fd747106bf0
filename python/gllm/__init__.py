"""gllm: Python client for gllmd, the attention-kernel daemon (ctypes over libgllm-client).

    import gllm, numpy as np
    with gllm.connect() as c:
        a = c.arena(1 << 20)
        q = a.numpy(np.float32, (1, 8, 16, 64))
        ...
        c.attention(q, k, v, out, causal=True)

Importing gllm needs neither numpy nor torch nor the library: each is loaded on first use.
"""
from ._lib import LibraryNotFound, library_path
from .client import (Caps, Client, ClientInfo, DeviceInfo, Job, JobResult, Limits, ModeCaps,
                     PagedKV, Status, attention, connect, find_client)
from .dtypes import BF16, F16, F32, I32, DType, as_dtype, bf16_to_f32, f32_to_bf16
from .errors import (AliasError, BackendError, BoundsError, BusyError, DeniedError,
                     DeviceLostError, DeviceMemoryError, DisconnectedError, DTypeError, Error,
                     HeadDimError, JobTimeoutError, LimitError, NotExportError,
                     NotSupportedError, ParamError, QuotaError, ShapeError, VariantError,
                     WaitTimeoutError)
from .memory import Memory, MemoryKind, Tensor
from .paged import PagedKVCache

__version__ = "0.1.0"


def version() -> str:
    """The version of the libgllm-client in use."""
    from . import _lib
    return _lib.text(_lib.lib().gllm_version())


__all__ = [
    "AliasError", "BF16", "BackendError", "BoundsError", "BusyError", "Caps", "Client",
    "ClientInfo", "DType", "DTypeError", "DeniedError", "DeviceInfo", "DeviceLostError",
    "DeviceMemoryError", "JobTimeoutError",
    "DisconnectedError", "Error", "F16", "F32", "HeadDimError", "I32", "Job", "JobResult",
    "LibraryNotFound", "LimitError", "Limits", "Memory", "MemoryKind", "ModeCaps",
    "NotExportError",
    "NotSupportedError", "PagedKV", "PagedKVCache", "ParamError", "QuotaError", "ShapeError",
    "Status", "Tensor", "as_dtype", "attention", "bf16_to_f32", "connect", "f32_to_bf16",
    "find_client", "library_path", "version", "VariantError", "WaitTimeoutError",
]
