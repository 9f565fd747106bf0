"""Torch tensors over gllmd-shared memory; torch is imported only when these are used."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from .dtypes import BF16, as_dtype

if TYPE_CHECKING:
    from .client import Client
    from .memory import Memory

# __cuda_array_interface__ type strings; torch takes no bfloat16 through it, so bf16 travels
# as int16 and the tensor is viewed as bfloat16 afterwards (same bits, same storage).
_TYPESTR = {0: "<f4", 1: "<f2", 2: "<i2", 3: "<i4"}


class CudaBuffer:
    """Exposes mapped gllm shared memory as __cuda_array_interface__ (version 3). The torch
    tensor made from it keeps this object, and through it the Memory, alive."""

    def __init__(self, memory: "Memory", address: int, shape: Sequence[int], dtype: Any):
        self.memory = memory
        self._dtype = as_dtype(dtype)
        self.__cuda_array_interface__ = {
            "shape": tuple(int(s) for s in shape),
            "typestr": _TYPESTR[int(self._dtype)],
            "data": (address, False),
            "strides": None,
            "version": 3,
            # Ordering is the host's for now (see Client): no stream to synchronise on here.
            "stream": None,
        }


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    return {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.int32}[
        int(as_dtype(dtype))]


def shared_tensor(client: "Client", shape: Sequence[int], dtype: Any, device: Any = None) -> Any:
    import torch
    dt = as_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    nbytes = max(math.prod(shape) * dt.itemsize, 1)
    share = client.caps.share
    if share == "memfd":
        mem = client.device_memory(nbytes, shared=True)
        arr = mem.numpy(dt, shape)                 # keeps mem alive through its base
        # bf16 bits go through int16, which torch supports fully (not so uint16)
        t = torch.from_numpy(arr.view("int16") if dt == BF16 else arr)
        return t.view(torch.bfloat16) if dt == BF16 else t
    if share != "cuda_vmm_fd":
        raise RuntimeError(f"gllmd shares no device memory (share {share!r})")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else \
        torch.device(device if not isinstance(device, int) else f"cuda:{device}")
    if dev.type != "cuda":
        raise ValueError(f"torch_tensor on the CUDA backend needs a CUDA device, not {dev}")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index):
        # gllm_memory_map maps into the calling thread's current context: make torch's
        # primary context current first.
        torch.empty(1, device=dev)
        mem = client.device_memory(nbytes, device=_gllm_device(client, index), shared=True)
        address = mem.map()
        buf = CudaBuffer(mem, address, shape, dt)
        t = torch.as_tensor(buf, device=dev)
    return t.view(torch.bfloat16) if dt == BF16 else t


def _gllm_device(client: "Client", cuda_index: int) -> int:
    # gllmd numbers the GPUs it serves; with CUDA_VISIBLE_DEVICES equal on both sides (the
    # usual case) they are torch's indices.
    n = client.caps.ndevices
    if cuda_index >= n:
        raise ValueError(f"cuda:{cuda_index} but gllmd serves {n} device(s)")
    return cuda_index
