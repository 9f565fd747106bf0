"""PagedKVCache: K/V page pools in gllm memory (one pair per layer), a page allocator, and
the FlashInfer page table of a batch of sequences, written once per step for all layers."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from .dtypes import as_dtype
from .memory import Tensor
from .ordering import Job
from .records import JobResult, PagedKV

if TYPE_CHECKING:
    from .client import Client


class PagedKVCache:
    """K pools [num_pages, page_size, Hkv, D] and V pools [num_pages, page_size, Hkv, Dv]
    per layer (FlashInfer's NHD layout; Dv = head_dim_v, D unless given) and the page tables
    of sequences that grow token by token; all layers share the pages.

    Sequences are integers from add_sequence(). One layer: append() writes new tokens' K and
    V and grows their sequences (taking pages as needed); decode() and prefill() run
    attention over the sequences named, in the order named.

    Several layers (a model's step): step(seqs, counts) grows the sequences and writes the
    page table once; then, for each layer, append_step(layer, k, v) and decode_step(layer,
    q, out) or prefill_step(layer, q, out) use it.

    The page table lives in an arena of the cache; the pools in memory "device" (gllmd's),
    "shared" (gllmd-shared: addressable by the caller's kernels on CUDA, numpy views on the
    CPU backend) or "arena".

    decode(), prefill() and their _step forms take the variant keywords of
    Client.attention_decode and Client.attention_prefill (window_left, window_right,
    attention_chunk, logits_soft_cap, alibi_slopes, sinks)."""

    def __init__(self, client: "Client", num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: Any, max_batch: int = 64, memory: str = "device",
                 num_layers: int = 1, head_dim_v: Optional[int] = None):
        self.client = client
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.num_kv_heads, self.head_dim = int(num_kv_heads), int(head_dim)
        self.head_dim_v = self.head_dim if head_dim_v is None else int(head_dim_v)
        self.dtype = as_dtype(dtype)
        self.max_batch = int(max_batch)
        self.num_layers = int(num_layers)
        # V's head dim (Dv, out's) may be below K's: its pools are sized by it
        shapes = [(self.num_pages, self.page_size, self.num_kv_heads, d)
                  for d in (self.head_dim, self.head_dim_v)]
        if memory == "device":
            alloc = client.device_memory
        elif memory == "shared":
            def alloc(n: int) -> Any:
                return client.device_memory(n, shared=True)
        elif memory == "arena":
            alloc = client.arena
        else:
            raise ValueError(f"memory must be 'device', 'shared' or 'arena', not {memory!r}")
        self._pool_mem = []
        self.k_caches: List[Tensor] = []
        self.v_caches: List[Tensor] = []
        try:
            for _ in range(self.num_layers):
                for pools, shape in zip((self.k_caches, self.v_caches), shapes):
                    self._pool_mem.append(alloc(math.prod(shape) * self.dtype.itemsize))
                    pools.append(Tensor(self._pool_mem[-1], self.dtype, shape))
            # indptr [B + 1], indices [num_pages], last_page_len [B], and the step's
            # indptrs of new tokens and of queries [B + 1] each; twice (see _writable)
            b1 = self.max_batch + 1
            self._table = client.arena(8 * (b1 + self.num_pages + self.max_batch + 2 * b1))
        except BaseException:
            for m in self._pool_mem:
                m.release()
            raise
        off = 0

        def take(n: int) -> Any:
            nonlocal off
            view = self._table.numpy("int32", (n,), off)
            off += 4 * n
            return view
        self._views = [tuple(take(n) for n in (b1, self.num_pages, self.max_batch, b1, b1))
                       for _ in range(2)]
        self._buf = 0                     # the copy of the table written now
        self._buf_jobs: List[Any] = [None, None]   # the last ordered Job reading each copy
        (self._indptr, self._indices, self._last, self._append_indptr,
         self._qo_indptr) = self._views[0]
        self._free: List[int] = list(range(self.num_pages - 1, -1, -1))
        self._pages: Dict[int, List[int]] = {}
        self._len: Dict[int, int] = {}
        self._next_id = 0
        self._version = 0                 # bumped whenever a sequence's pages or length change
        self._table_key: Optional[Tuple[Any, int]] = None
        self._kv: List[PagedKV] = []
        # Each sequence's pages as an int32 array, made again only when its pages change
        # (every page_size tokens), so that writing the table is a few numpy calls.
        self._page_arr: Dict[int, Any] = {}
        # Per copy of the table and batch size: the PagedKV of each layer and the step's
        # indptr views, the same objects step after step, so the client names them without
        # describing them again (a B64 step wrote and described its table in 0.65 ms).
        self._stable: Dict[Tuple[int, int], Tuple[List[PagedKV], Any, Any]] = {}
        self._step_seqs: Tuple[int, ...] = ()
        self._step_counts: Optional[Tuple[int, ...]] = None
        self._step_indptr: Any = None

    @property
    def k_cache(self) -> Tensor:
        """Layer 0's K pool."""
        return self.k_caches[0]

    @property
    def v_cache(self) -> Tensor:
        """Layer 0's V pool."""
        return self.v_caches[0]

    # --- sequences -------------------------------------------------------------------
    def add_sequence(self) -> int:
        """A new, empty sequence's id."""
        sid = self._next_id
        self._next_id += 1
        self._pages[sid], self._len[sid] = [], 0
        self._page_arr.pop(sid, None)
        return sid

    def free_sequence(self, sid: int) -> None:
        """Gives a sequence's pages back to the pool."""
        self._free.extend(reversed(self._pages.pop(sid)))
        del self._len[sid]
        self._page_arr.pop(sid, None)
        self._version += 1

    def length(self, sid: int) -> int:
        return self._len[sid]

    def pages(self, sid: int) -> List[int]:
        """The pool pages of sequence sid, in order."""
        return list(self._pages[sid])

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def _grow(self, sid: int, n: int) -> None:
        need = -(-(self._len[sid] + n) // self.page_size) - len(self._pages[sid])
        if need > len(self._free):
            raise MemoryError(f"paged cache full: sequence {sid} needs {need} more pages, "
                              f"{len(self._free)} free")
        for _ in range(need):
            self._pages[sid].append(self._free.pop())
        if need > 0:
            self._page_arr.pop(sid, None)
        self._len[sid] += n
        self._version += 1

    def _shrink(self, sid: int, n: int) -> None:
        self._len[sid] -= n
        keep = -(-self._len[sid] // self.page_size)
        while len(self._pages[sid]) > keep:
            self._free.append(self._pages[sid].pop())
            self._page_arr.pop(sid, None)
        self._version += 1

    def _writable(self) -> None:
        """Called before the table is written. gllmd reads the table when a job runs, and a
        job ordered on a CUDA stream runs when the stream gets there, after this call
        returns: so while jobs may still read this copy, writes go to the other copy, once
        the jobs reading that one are done (a step ago, usually: no wait)."""
        j = self._buf_jobs[self._buf]
        if j is None or j.done():
            return
        self._buf ^= 1
        other = self._buf_jobs[self._buf]
        if other is not None and not other.done():
            other.result()
        self._buf_jobs[self._buf] = None
        (self._indptr, self._indices, self._last, self._append_indptr,
         self._qo_indptr) = self._views[self._buf]
        self._table_key = None            # this copy holds an older table: write all of it

    def _track(self, result: Any) -> Any:
        """Notes a job ordered on a stream as the latest reader of the current copy."""
        if isinstance(result, Job):
            self._buf_jobs[self._buf] = result
        return result

    def _table_for(self, seqs: Sequence[int]) -> List[PagedKV]:
        """The page table of seqs, per layer; rewritten only when something changed."""
        key = (tuple(seqs), self._version)
        if key == self._table_key:
            return self._kv
        self._writable()
        B = len(seqs)
        if not 1 <= B <= self.max_batch:
            raise ValueError(f"batch of {B} outside 1..{self.max_batch}")
        import numpy as np
        arrays = []
        for sid in seqs:
            a = self._page_arr.get(sid)
            if a is None:
                a = self._page_arr[sid] = np.array(self._pages[sid], dtype=np.int32)
            arrays.append(a)
        counts = np.fromiter((a.size for a in arrays), np.int64, B)
        lengths = np.fromiter((self._len[sid] for sid in seqs), np.int64, B)
        self._indptr[0] = 0
        np.cumsum(counts, out=self._indptr[1:B + 1])
        n = int(self._indptr[B])
        if n:
            np.concatenate(arrays, out=self._indices[:n])
        # an empty sequence has no last page: gllmd refuses it by name
        self._last[:B] = np.where(counts > 0, (lengths - 1) % self.page_size + 1, 0)
        self._kv = self._views_for(B)[0]
        self._table_key = key
        return self._kv

    def _views_for(self, B: int) -> Tuple[List[PagedKV], Any, Any]:
        """The current copy's PagedKV per layer and step indptrs for a batch of B. The page
        table view is all of kv_indices: gllmd reads the first indptr[B] entries."""
        key = (self._buf, B)
        views = self._stable.get(key)
        if views is None:
            indptr, last = self._indptr[:B + 1], self._last[:B]
            kv = [PagedKV(k, v, indptr, self._indices, last)
                  for k, v in zip(self.k_caches, self.v_caches)]
            views = self._stable[key] = (kv, self._append_indptr[:B + 1],
                                         self._qo_indptr[:B + 1])
        return views

    @staticmethod
    def _indptr_of(dst: Any, counts: Sequence[int]) -> Any:
        dst[0] = 0
        total = 0
        for b, c in enumerate(counts):
            if c < 0:
                raise ValueError("negative token count")
            total += int(c)
            dst[b + 1] = total
        return dst[:len(counts) + 1]

    # --- a step of all layers ----------------------------------------------------------
    def step(self, seqs: Sequence[int], counts: Sequence[int]) -> None:
        """Grows sequence seqs[b] by counts[b] new tokens (0 for none) and writes the page
        table that this step's append_step, prefill_step and decode_step calls use. A cache
        too small raises MemoryError and changes nothing."""
        if len(counts) != len(seqs):
            raise ValueError("one count per sequence")
        counts = tuple(int(c) for c in counts)
        grown: List[Tuple[int, int]] = []
        self._writable()
        try:
            for sid, c in zip(seqs, counts):
                if c < 0:
                    raise ValueError("negative token count")
                self._grow(sid, c)
                grown.append((sid, c))
            self._table_for(seqs)
        except BaseException:
            self.undo_step(grown)
            raise
        self._step_seqs = tuple(seqs)
        self._step_counts = counts
        import numpy as np
        _, self._step_indptr, qo = self._views_for(len(seqs))
        self._step_indptr[0] = 0
        np.cumsum(counts, out=self._step_indptr[1:])
        qo[:] = self._step_indptr

    def undo_step(self, grown: Optional[Sequence[Tuple[int, int]]] = None) -> None:
        """Takes back the tokens the last step() added (after a failed append)."""
        if grown is None:
            grown = list(zip(self._step_seqs, self._step_counts or ()))
            self._step_counts = None
        for sid, c in reversed(list(grown)):
            self._shrink(sid, c)

    def _step_kv(self, layer: int) -> PagedKV:
        if self._step_counts is None:
            raise RuntimeError("no step: call step(seqs, counts) first")
        return self._table_for(self._step_seqs)[layer]

    def append_step(self, layer: int, k: Any, v: Any, stream: Any = None) -> JobResult:
        """Writes this step's new tokens' K [N, Hkv, D] and V [N, Hkv, Dv] (sequences one
        after the other) into layer's pools."""
        kv = self._step_kv(layer)
        return self._track(self.client.kv_append(kv, k, v, self._step_indptr, stream=stream))

    def prefill_step(self, layer: int, q: Any, out: Any, scale: Optional[float] = None,
                     stream: Any = None, **variant: Any) -> JobResult:
        """Chunked prefill of layer for this step's new tokens (q [N, Hq, D], out [N, Hq,
        Dv]): each attends causally to its sequence's prefix and to the new tokens before
        it."""
        kv = self._step_kv(layer)
        return self._track(self.client.attention_prefill(
            kv, q, out, self._views_for(len(self._step_seqs))[2], scale=scale, stream=stream,
            **variant))

    def decode_step(self, layer: int, q: Any, out: Any, scale: Optional[float] = None,
                    stream: Any = None, **variant: Any) -> JobResult:
        """Decode of layer: one query per sequence of the step (q [B, Hq, D], out [B, Hq,
        Dv])."""
        kv = self._step_kv(layer)
        return self._track(self.client.attention_decode(kv, q, out, scale=scale, stream=stream,
                                                        **variant))

    def append_attention_step(self, layer: int, k: Any, v: Any, q: Any, out: Any,
                              decode: bool, scale: Optional[float] = None,
                              stream: Any = None, **variant: Any) -> Any:
        """append_step then decode_step (decode) or prefill_step, as one run ordered on the
        stream: see Client.append_attention."""
        kv = self._step_kv(layer)
        qo = None if decode else self._views_for(len(self._step_seqs))[2]
        return self._track(self.client.append_attention(kv, k, v, self._step_indptr, q, out,
                                                        qo_indptr=qo, scale=scale, stream=stream,
                                                        **variant))

    # --- one layer ---------------------------------------------------------------------
    def append(self, seqs: Sequence[int], k: Any, v: Any, counts: Sequence[int],
               layer: int = 0, stream: Any = None) -> JobResult:
        """Appends counts[b] new tokens to sequence seqs[b]: rows of k [N, Hkv, D] and v [N,
        Hkv, Dv] (N = sum(counts), sequences' tokens one after the other) in gllm memory. With
        several layers use step() and append_step(): this grows the sequences itself. If
        gllmd refuses the append, the sequences are left as they were."""
        self.step(seqs, counts)
        try:
            return self.append_step(layer, k, v, stream=stream)
        except BaseException:
            self.undo_step()
            raise

    def decode(self, seqs: Sequence[int], q: Any, out: Any, scale: Optional[float] = None,
               layer: int = 0, stream: Any = None, **variant: Any) -> JobResult:
        """One query per sequence (q [B, Hq, D], out [B, Hq, Dv]) attending to all its
        tokens (within the variant's masks)."""
        return self._track(self.client.attention_decode(self._table_for(seqs)[layer], q, out,
                                                        scale=scale, stream=stream, **variant))

    def prefill(self, seqs: Sequence[int], q: Any, out: Any, counts: Sequence[int],
                scale: Optional[float] = None, layer: int = 0,
                stream: Any = None, **variant: Any) -> JobResult:
        """Chunked prefill: the counts[b] queries of sequence seqs[b] (q [N, Hq, D], out
        [N, Hq, Dv]) are its last counts[b] tokens, already appended; they attend causally
        (within the variant's masks)."""
        if len(counts) != len(seqs):
            raise ValueError("one count per sequence")
        self._writable()
        kv = self._table_for(seqs)[layer]
        qo = self._indptr_of(self._qo_indptr, counts)
        return self._track(self.client.attention_prefill(kv, q, out, qo, scale=scale,
                                                         stream=stream, **variant))

    def release(self) -> None:
        """Gives the pools and the table back."""
        for m in self._pool_mem + [self._table]:
            m.release()

    def __enter__(self) -> "PagedKVCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
