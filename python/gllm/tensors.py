"""Tensor resolution: a gllm Tensor, a NumPy array or a torch tensor as the gllm_tensor
struct that names it, found by address among one client's memories."""
from __future__ import annotations

import weakref
from typing import Any, Dict, Tuple

from . import _lib
from .dtypes import as_dtype
from .memory import Memory, Tensor
from .records import PagedKV

# Past this many entries a cache is cleared rather than searched for dead ones: a serving
# loop names a few hundred buffers, and a cache this big means the caller makes new ones.
_CACHE_MAX = 4096


def is_torch(x: Any) -> bool:
    """Whether x is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def describe(x: Any) -> Tuple[int, int, Tuple[int, ...], Any, bool]:
    """Address, bytes, shape, dtype and CUDA-ness of a numpy array or torch tensor."""
    if is_torch(x):
        if not x.is_contiguous():
            raise ValueError("gllm needs contiguous torch tensors")
        return (x.data_ptr(), x.numel() * x.element_size(), tuple(x.shape), x.dtype,
                bool(x.is_cuda))
    if hasattr(x, "__array_interface__"):
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError("gllm needs C-contiguous numpy arrays")
        return x.__array_interface__["data"][0], x.nbytes, tuple(x.shape), x.dtype, False
    raise TypeError(f"not a tensor gllm can name: {type(x).__name__}")


class TensorResolver:
    """One client's memories and the structs naming its tensors. Serving loops pass the same
    buffers step after step: their structs are kept, per memory, until it is released."""

    def __init__(self, client: Any):
        self._client = client            # Tensors of other clients' memory are refused
        self._memories: "weakref.WeakSet[Memory]" = weakref.WeakSet()
        # weak: a cached struct must not keep its memory (and a torch tensor's) alive
        self._structs: Dict[Any, Tuple[_lib.GllmTensor, "weakref.ref[Memory]"]] = {}
        # tensors by object: (the object, its address, strides and shape then, the struct,
        # CUDA-ness, its memory, whether it can move), all weak
        self._by_object: Dict[int, Tuple[Any, ...]] = {}
        # PagedKVs by object: (the object, its struct, CUDA-ness, its memories), all weak
        self._paged: Dict[int, Tuple[Any, ...]] = {}

    def add(self, m: Memory) -> None:
        """A memory of this client, where tensors are looked for."""
        self._memories.add(m)

    def forget(self, m: Memory) -> None:
        """m is released: drop it and the structs naming it."""
        self._memories.discard(m)
        for key in [k for k, (_, ref) in self._structs.items() if ref() in (m, None)]:
            del self._structs[key]

    def find(self, x: Any) -> Tuple[Tensor, bool]:
        """x as a Tensor of this client's memory, and whether it is a torch CUDA tensor."""
        if isinstance(x, Tensor):
            if x.memory.client is not self._client:
                raise ValueError("tensor belongs to another client")
            return x, False
        address, nbytes, shape, dtype, cuda = describe(x)
        for m in list(self._memories):
            if not m.released and m.contains(address, max(nbytes, 1)):
                return Tensor(m, as_dtype(dtype), shape, m.offset_of(address)), cuda
        raise ValueError(f"tensor of shape {list(shape)} is not in gllm memory of this client "
                         "(allocate it with Client.arena().numpy() or Client.torch_tensor())")

    def owns(self, x: Any) -> bool:
        """Whether x lies in this client's memory."""
        try:
            self.find(x)
            return True
        except (ValueError, TypeError):
            return False

    def struct(self, x: Any) -> Tuple[_lib.GllmTensor, bool]:
        """The gllm_tensor naming x, and whether x is a torch CUDA tensor."""
        st, cuda, _ = self.struct_mem(x)
        return st, cuda

    def struct_mem(self, x: Any) -> Tuple[_lib.GllmTensor, bool, Memory]:
        """struct(), and the memory x lies in."""
        # The fast path: the same object as before, still over the same bytes (describing a
        # torch tensor or a numpy array costs several microseconds, which a serving loop pays
        # per tensor per layer). A numpy array or a Tensor never moves; a torch tensor may
        # (set_), so its address and strides are compared.
        seen = self._by_object.get(id(x))
        if seen is not None and seen[0]() is x and x.shape == seen[3] and \
                (seen[7] or (x.data_ptr() == seen[1] and x.stride() == seen[2])):
            mem = seen[6]()
            if mem is not None and not mem.released:
                return seen[4], seen[5], mem
        if isinstance(x, Tensor):
            t, _ = self.find(x)
            st, cuda, mem = t.c_struct(), False, t.memory
            self._remember(x, (weakref.ref(x), 0, None, x.shape, st, cuda, weakref.ref(mem),
                               True))
            return st, cuda, mem
        torch_like = is_torch(x)
        address, nbytes, shape, dtype, cuda = describe(x)
        key = (address, shape, dtype, cuda)
        hit = self._structs.get(key)
        if hit is not None:
            m = hit[1]()
            if m is None or m.released:
                hit = None
        if hit is None:
            t, cuda = self.find(x)
            if len(self._structs) >= _CACHE_MAX:
                self._structs.clear()
            hit = self._structs[key] = (t.c_struct(), weakref.ref(t.memory))
        st, mem = hit[0], hit[1]()
        try:
            ref = weakref.ref(x)
        except TypeError:             # an object without weak references: no fast path
            return st, cuda, mem
        self._remember(x, (ref, address, x.stride() if torch_like else None, x.shape, st, cuda,
                           hit[1], not torch_like))
        return st, cuda, mem

    def _remember(self, x: Any, entry: Tuple[Any, ...]) -> None:
        if len(self._by_object) >= _CACHE_MAX:
            self._by_object.clear()
        self._by_object[id(x)] = entry

    def paged_kv(self, kv: PagedKV) -> Tuple[_lib.GllmPagedKV, bool]:
        """The gllm_paged_kv naming kv's tensors, and whether any is a torch CUDA tensor."""
        # A PagedKV names the same buffers every time (PagedKVCache makes a new one when its
        # table moves): its struct is kept while it and its memories live.
        cached = self._paged.get(id(kv))
        if cached is not None and cached[0]() is kv and \
                all(m() is not None and not m().released for m in cached[3]):
            return cached[1], cached[2]
        s = _lib.GllmPagedKV()
        any_cuda = False
        mems = []
        for f in ("k_cache", "v_cache", "indptr", "indices", "last_page_len"):
            st, cuda, mem = self.struct_mem(getattr(kv, f))
            any_cuda |= cuda
            mems.append(weakref.ref(mem))
            setattr(s, f, st)
        if len(self._paged) >= _CACHE_MAX:
            self._paged.clear()
        self._paged[id(kv)] = (weakref.ref(kv), s, any_cuda, mems)
        return s, any_cuda
