"""PagedKVCache: K/V page pools in gllm memory, a page allocator, and FlashInfer page tables
for the sequences of a batch, built for each kv_append, decode and prefill call."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from .client import JobResult, PagedKV
from .dtypes import as_dtype
from .memory import Tensor

if TYPE_CHECKING:
    from .client import Client


class PagedKVCache:
    """K and V pools [num_pages, page_size, Hkv, D] (FlashInfer's NHD layout) and the page
    tables of sequences that grow token by token.

    Sequences are integers from add_sequence(). append() writes new tokens' K and V and
    grows their sequences (taking pages from the pool as needed); decode() and prefill()
    run attention over the sequences named, in the order named. The page tables live in an
    arena of this cache; the pools in memory "device" (gllmd's), "shared" (gllmd-shared:
    k_pool and v_pool are then numpy views on the CPU backend, and addressable by the
    caller's kernels on CUDA) or "arena"."""

    def __init__(self, client: "Client", num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: Any, max_batch: int = 64, memory: str = "device"):
        self.client = client
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.num_kv_heads, self.head_dim = int(num_kv_heads), int(head_dim)
        self.dtype = as_dtype(dtype)
        self.max_batch = int(max_batch)
        pool_shape = (self.num_pages, self.page_size, self.num_kv_heads, self.head_dim)
        pool_bytes = self.num_pages * self.page_size * self.num_kv_heads * self.head_dim * \
            self.dtype.itemsize
        if memory == "device":
            self._pool_mem = [client.device_memory(pool_bytes) for _ in range(2)]
        elif memory == "shared":
            self._pool_mem = [client.device_memory(pool_bytes, shared=True) for _ in range(2)]
        elif memory == "arena":
            self._pool_mem = [client.arena(pool_bytes) for _ in range(2)]
        else:
            raise ValueError(f"memory must be 'device', 'shared' or 'arena', not {memory!r}")
        self.k_cache = Tensor(self._pool_mem[0], self.dtype, pool_shape)
        self.v_cache = Tensor(self._pool_mem[1], self.dtype, pool_shape)
        # Page table: indptr [B + 1], indices [num_pages], last_page_len [B], and the
        # per-call indptrs of new tokens and of queries [B + 1] each.
        b1 = self.max_batch + 1
        n_i32 = b1 + self.num_pages + self.max_batch + 2 * b1
        self._table = client.arena(4 * n_i32)
        off = 0

        def take(n: int) -> Any:
            nonlocal off
            view = self._table.numpy("int32", (n,), off)
            off += 4 * n
            return view
        self._indptr = take(b1)
        self._indices = take(self.num_pages)
        self._last = take(self.max_batch)
        self._append_indptr = take(b1)
        self._qo_indptr = take(b1)
        self._free: List[int] = list(range(self.num_pages - 1, -1, -1))
        self._pages: Dict[int, List[int]] = {}
        self._len: Dict[int, int] = {}
        self._next_id = 0

    # --- sequences -------------------------------------------------------------------
    def add_sequence(self) -> int:
        """A new, empty sequence's id."""
        sid = self._next_id
        self._next_id += 1
        self._pages[sid], self._len[sid] = [], 0
        return sid

    def free_sequence(self, sid: int) -> None:
        """Gives a sequence's pages back to the pool."""
        self._free.extend(reversed(self._pages.pop(sid)))
        del self._len[sid]

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
        self._len[sid] += n

    def _shrink(self, sid: int, n: int) -> None:
        self._len[sid] -= n
        keep = -(-self._len[sid] // self.page_size)
        while len(self._pages[sid]) > keep:
            self._free.append(self._pages[sid].pop())

    def _table_for(self, seqs: Sequence[int]) -> PagedKV:
        if not 1 <= len(seqs) <= self.max_batch:
            raise ValueError(f"batch of {len(seqs)} outside 1..{self.max_batch}")
        self._indptr[0] = 0
        n = 0
        for b, sid in enumerate(seqs):
            pages = self._pages[sid]
            self._indices[n:n + len(pages)] = pages
            n += len(pages)
            self._indptr[b + 1] = n
            # an empty sequence has no last page: gllmd refuses it by name
            self._last[b] = (self._len[sid] - 1) % self.page_size + 1 if pages else 0
        B = len(seqs)
        return PagedKV(self.k_cache, self.v_cache, self._indptr[:B + 1],
                       self._indices[:max(n, 1)], self._last[:B])

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

    # --- jobs -------------------------------------------------------------------------
    def append(self, seqs: Sequence[int], k: Any, v: Any, counts: Sequence[int],
               stream: Any = None) -> JobResult:
        """Appends counts[b] new tokens to sequence seqs[b]: rows of k and v ([N, Hkv, D],
        N = sum(counts), sequences' tokens one after the other) in gllm memory."""
        if len(counts) != len(seqs):
            raise ValueError("one count per sequence")
        grown: List[Any] = []
        try:
            for sid, c in zip(seqs, counts):
                self._grow(sid, int(c))
                grown.append((sid, int(c)))
            kv = self._table_for(seqs)
            ai = self._indptr_of(self._append_indptr, counts)
            return self.client.kv_append(kv, k, v, ai, stream=stream)
        except BaseException:
            for sid, c in reversed(grown):
                self._shrink(sid, c)
            raise

    def decode(self, seqs: Sequence[int], q: Any, out: Any, scale: Optional[float] = None,
               stream: Any = None) -> JobResult:
        """One query per sequence (q and out [B, Hq, D]) attending to all its tokens."""
        return self.client.attention_decode(self._table_for(seqs), q, out, scale=scale,
                                            stream=stream)

    def prefill(self, seqs: Sequence[int], q: Any, out: Any, counts: Sequence[int],
                scale: Optional[float] = None, stream: Any = None) -> JobResult:
        """Chunked prefill: the counts[b] queries of sequence seqs[b] (q and out [N, Hq, D])
        are its last counts[b] tokens, already appended; they attend causally."""
        if len(counts) != len(seqs):
            raise ValueError("one count per sequence")
        kv = self._table_for(seqs)
        qo = self._indptr_of(self._qo_indptr, counts)
        return self.client.attention_prefill(kv, q, out, qo, scale=scale, stream=stream)

    def release(self) -> None:
        """Gives the pools and the table back."""
        for m in self._pool_mem + [self._table]:
            m.release()

    def __enter__(self) -> "PagedKVCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
