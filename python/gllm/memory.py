"""Memory (arenas, device memory, shared memory) and tensors: views of it that jobs name."""
from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

from . import _lib
from .dtypes import as_dtype

if TYPE_CHECKING:
    from .client import Client
    from .connection import Connection


class MemoryKind:
    ARENA = _lib.MEMORY_ARENA
    DEVICE = _lib.MEMORY_DEVICE
    SHARED = _lib.MEMORY_SHARED


_KIND_NAMES = {MemoryKind.ARENA: "arena", MemoryKind.DEVICE: "device", MemoryKind.SHARED: "shared"}


class Memory:
    """A gllm_memory handle: an arena (host memory both processes map), device memory
    (gllmd's; this process cannot touch it but copies to and from arenas), or shared memory
    (device memory both processes address: on the CPU backend a memfd this process maps, on
    CUDA a CUdeviceptr in this process's CUDA context after map()).

    Release it with release() or a `with` block; otherwise it is released when garbage
    collected. Views made with numpy() keep it alive; after an explicit release() they must
    not be used.

    Made by the Client (arena(), device_memory(), import_memory()), which hands it the
    connection it calls the library through."""

    def __init__(self, connection: "Connection", client: "Client", handle: int,
                 imported: bool = False):
        self._connection = connection
        self._client = client
        self._handle: Optional[int] = handle
        lib = _lib.lib()
        self.kind: int = lib.gllm_memory_kind_of(handle)
        self.nbytes: int = lib.gllm_memory_size(handle)
        self.imported = imported
        self.host_address: Optional[int] = lib.gllm_memory_data(handle) or None
        self.device_address: Optional[int] = None

    def __repr__(self) -> str:
        state = "released" if self._handle is None else f"{self.nbytes} bytes"
        return f"<gllm.Memory {_KIND_NAMES.get(self.kind, self.kind)} {state}>"

    @property
    def client(self) -> "Client":
        return self._client

    @property
    def handle(self) -> int:
        """The gllm_memory * as an integer (for ctypes calls of your own)."""
        if self._handle is None:
            raise ValueError("memory already released")
        return self._handle

    @property
    def released(self) -> bool:
        """Whether release() has given the memory back."""
        return self._handle is None

    @property
    def kind_name(self) -> str:
        return _KIND_NAMES.get(self.kind, str(self.kind))

    def map(self) -> int:
        """The address this process uses for shared memory: the host mapping on the CPU
        backend (share "memfd"), a CUdeviceptr mapped into the calling thread's current CUDA
        context on CUDA (share "cuda_vmm_fd"; the first call maps it)."""
        if self.device_address is not None:
            return self.device_address
        ptr = ctypes.c_void_p()
        self._connection.call_plain("gllm_memory_map", self.handle, ctypes.byref(ptr))
        self.device_address = ptr.value or 0
        return self.device_address

    def tensor(self, dtype: Any, shape: Sequence[int], offset: int = 0) -> "Tensor":
        """A contiguous tensor at offset (bytes) in this memory."""
        return Tensor(self, dtype, shape, offset)

    def numpy(self, dtype: Any, shape: Sequence[int], offset: int = 0) -> Any:
        """A numpy array viewing this memory (arenas, and shared memory on the CPU backend):
        writes go straight to the memory gllmd reads. np.float32, np.float16 and np.int32
        views are what they say; bf16 is a uint16 view of bit patterns (gllm.f32_to_bf16 and
        gllm.bf16_to_f32 convert)."""
        import numpy as np
        if self.host_address is None:
            raise ValueError(f"{self.kind_name} memory is not mapped in this process "
                             "(copy it to an arena with Client.copy)")
        dt = as_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        count = math.prod(shape)
        nbytes = count * dt.itemsize
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"a view of {nbytes} bytes at offset {offset} does not fit in "
                             f"{self.nbytes} bytes")
        if offset % dt.itemsize:
            raise ValueError(f"offset {offset} is not aligned to {dt.itemsize} bytes")
        buf = (ctypes.c_char * max(nbytes, 1)).from_address(self.host_address + offset)
        buf._gllm_memory = self     # the view's base chain keeps the memory alive
        return np.frombuffer(buf, dtype=dt.numpy_name, count=count).reshape(shape)

    def contains(self, address: int, nbytes: int) -> bool:
        """Whether [address, address + nbytes) lies in this memory's host or device mapping."""
        for base in (self.host_address, self.device_address):
            if base is not None and base <= address and address + nbytes <= base + self.nbytes:
                return True
        return False

    def offset_of(self, address: int) -> int:
        for base in (self.host_address, self.device_address):
            if base is not None and base <= address < base + self.nbytes:
                return address - base
        raise ValueError("address outside this memory")

    def release(self) -> None:
        """Gives the memory back on both sides (idempotent)."""
        h, self._handle = self._handle, None
        if h is None:
            return
        self._connection.memory_released(self)
        with self._connection.lock:
            r = _lib.lib().gllm_memory_release(h)
        self.host_address = self.device_address = None
        if r < 0 and not self._connection.closed:
            self._connection.check("gllm_memory_release", r)

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            if self._handle is not None:
                self.release()
        except Exception:
            pass


class Tensor:
    """A contiguous (row-major) view of gllm memory: memory, byte offset, dtype, shape."""

    def __init__(self, memory: Memory, dtype: Any, shape: Sequence[int], offset: int = 0):
        self.memory = memory
        self.dtype = as_dtype(dtype)
        self.shape: Tuple[int, ...] = tuple(int(s) for s in shape)
        self.offset = int(offset)
        if not 1 <= len(self.shape) <= _lib.MAX_RANK:
            raise ValueError(f"rank {len(self.shape)} outside 1..{_lib.MAX_RANK}")
        if self.offset < 0 or self.offset + self.nbytes > memory.nbytes:
            raise ValueError(f"tensor of {self.nbytes} bytes at offset {self.offset} does not "
                             f"fit in {memory!r}")

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"<gllm.Tensor {self.dtype.name} {list(self.shape)} at {self.offset} of "
                f"{self.memory!r}>")

    def numpy(self) -> Any:
        """A numpy view (host-visible memory only; bf16 as uint16 bit patterns)."""
        return self.memory.numpy(self.dtype, self.shape, self.offset)

    def c_struct(self) -> _lib.GllmTensor:
        t = _lib.GllmTensor()
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        self.memory._connection.call_plain("gllm_tensor_init", self.memory.handle,
                                           self.offset, int(self.dtype), len(self.shape), shape,
                                           ctypes.byref(t))
        return t
