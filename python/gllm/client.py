"""A connection to gllmd: status, memory, and the attention jobs (dense and paged).

The records it returns are in records.py, tensor resolution in tensors.py and job running
(stream ordering) in ordering.py; their public names are importable from here as before."""
from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from . import _lib
from .connection import Connection
from .dtypes import DType
from .memory import Memory, Tensor
from .ordering import Job, JobRunner
from .records import (Caps, ClientInfo, DeviceInfo, JobResult, Limits, PagedKV, Status,
                      from_struct)
from .tensors import TensorResolver
from .variants import ModeCaps, mode_caps, mode_number, set_variant

if TYPE_CHECKING:
    from .paged import PagedKVCache

# Every open client, so that module-level gllm.attention(...) can find the one that owns a
# tensor's memory.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()

__all__ = ["Caps", "Client", "ClientInfo", "DeviceInfo", "Job", "JobResult", "Limits",
           "ModeCaps", "PagedKV", "Status", "attention", "connect", "find_client"]



class Client:
    """A connection to gllmd (gllm_client). Use it as a context manager, or call close().

    Like the C library, a Client belongs to one thread at a time; this class adds a lock so
    that concurrent calls from several threads are serialised rather than unsafe.

    Job calls on host memory (arenas, numpy) are synchronous: they return the job's
    JobResult once gllmd has replied. A job on torch CUDA tensors is ordered on the
    caller's CUDA stream instead (`stream=`, torch.cuda.current_stream() by default): the
    stream raises a counter once the work queued on it so far is done, gllmd's job waits
    for that counter on its side and raises another when its kernel is done, and the
    stream waits for that one before the work queued after the call. The host waits for
    nothing; the call returns a Job at once. Its reply is claimed later (Job.result(),
    Client.synchronize(), or the next job call, which raises the error of a failed one).
    Where gllmd cannot order jobs this way (`ordered` is False: a CPU backend, or no
    CUDA stream support), the call synchronises the stream on the host and runs the job
    synchronously."""

    def __init__(self, socket: Optional[str] = None):
        self._conn: Optional[Connection] = None   # for close(), from __del__, if connect fails
        self._conn = Connection(socket)
        self.socket = socket
        caps = _lib.sized(_lib.GllmCaps)
        try:
            self._conn.call("gllm_client_caps", ctypes.byref(caps))
        except BaseException:
            self._conn.disconnect()
            raise
        self._caps = from_struct(caps, Caps,
                                 dtypes=tuple(d for d in DType if caps.dtypes & (1 << d)))
        self._tensors = TensorResolver(self)
        self._conn.release_hooks.append(self._tensors.forget)
        self._runner = JobRunner(self, self._conn, self._caps.share)
        self._mode_caps: Dict[int, ModeCaps] = {}
        _clients.add(self)

    # --- lifetime -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._conn is None or self._conn.closed

    def close(self) -> None:
        """Disconnects. gllmd gives back this connection's memory; Memory objects still
        alive only free their handles when released."""
        if self._conn is not None:
            with self._conn.lock:
                if not self._conn.closed:
                    # Ordered jobs first: a stream may still wait on the library's counters.
                    self._runner.drain()
                self._conn.disconnect()
        _clients.discard(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self) -> int:
        """The gllm_client * as an integer."""
        assert self._conn is not None
        return self._conn.handle

    # --- what the daemon is ---------------------------------------------------------
    @property
    def caps(self) -> Caps:
        """What the daemon announced in hello."""
        return self._caps

    @property
    def limits(self) -> Limits:
        lim = _lib.sized(_lib.GllmLimits)
        self._conn.call("gllm_client_limits", ctypes.byref(lim))
        return from_struct(lim, Limits)

    @property
    def devices(self) -> List[DeviceInfo]:
        out = []
        for i in range(self._caps.ndevices):
            d = _lib.sized(_lib.GllmDeviceInfo)
            self._conn.call("gllm_client_device", i, ctypes.byref(d))
            out.append(from_struct(d, DeviceInfo))
        return out

    def status(self) -> Status:
        """The daemon's counters now, with its clients."""
        with self._conn.lock:
            st = _lib.sized(_lib.GllmStatus)
            self._conn.call("gllm_status_get", ctypes.byref(st))
            listed = []
            for i in range(st.nlisted):
                ci = _lib.sized(_lib.GllmClientInfo)
                self._conn.call("gllm_status_client", i, ctypes.byref(ci))
                listed.append(from_struct(ci, ClientInfo))
        return from_struct(st, Status, listed=tuple(listed))

    def set_wait_spin(self, us: int) -> None:
        """How long job calls poll for the reply before sleeping (gllm_client_set_wait_spin)."""
        with self._conn.lock:
            _lib.lib().gllm_client_set_wait_spin(self.handle, int(us))

    def mode_caps(self, mode: Any = "dense") -> ModeCaps:
        """What the backend computes in mode "dense" (attention), "decode" or "prefill":
        the variant fields (ModeCaps.variants: "window", "attention_chunk",
        "logits_soft_cap", "alibi_slopes", "sinks", "head_dim_v") and the head dims."""
        n = mode_number(mode)
        got = self._mode_caps.get(n)
        if got is None:     # hello's: fixed per connection
            got = self._mode_caps[n] = mode_caps(self._conn, n, lambda: self.limits.max_head_dim)
        return got

    # --- memory ---------------------------------------------------------------------
    def _new_memory(self, name: str, *args: Any, imported: bool = False) -> Memory:
        h = ctypes.c_void_p()
        self._conn.call(name, *args, ctypes.byref(h))
        m = Memory(self._conn, self, h.value, imported=imported)
        self._tensors.add(m)
        return m

    def arena(self, nbytes: int) -> Memory:
        """Shared host memory gllmd maps (a sealed memfd): fill it through .numpy() views."""
        return self._new_memory("gllm_arena_create", int(nbytes))

    def device_memory(self, nbytes: int, device: int = 0, shared: bool = False) -> Memory:
        """Device memory owned by gllmd. shared=False: only gllmd touches it (copy with
        Client.copy). shared=True: gllmd exports it and this process addresses it too
        (Memory.map(); on the CPU backend also .numpy()); the size is rounded up to
        caps.share_granularity."""
        if shared:
            return self._new_memory("gllm_memory_create_shared", int(nbytes), int(device))
        return self._new_memory("gllm_dtensor_create", int(nbytes), int(device))

    def import_memory(self, fd: int, nbytes: int, device: int = 0) -> Memory:
        """The caller's own memory, which gllmd maps for its jobs: with share "memfd" a memfd
        sealed against shrinking, with "cuda_vmm_fd" the POSIX fd of a cuMemCreate
        allocation. The caller keeps fd and its own mapping; register that mapping's address
        with Memory.device_address/host_address if tensors are to be found by address."""
        return self._new_memory("gllm_memory_import", int(fd), int(nbytes), int(device),
                                imported=True)

    def copy(self, dst: Memory, src: Memory, nbytes: Optional[int] = None,
             dst_offset: int = 0, src_offset: int = 0) -> None:
        """Copies between an arena and device or shared memory (a job; waits for it)."""
        if nbytes is None:
            nbytes = min(dst.nbytes - dst_offset, src.nbytes - src_offset)
        self._conn.call("gllm_memory_copy", dst.handle, int(dst_offset), src.handle,
                        int(src_offset), int(nbytes))

    def tensor(self, memory: Memory, dtype: Any, shape: Sequence[int], offset: int = 0) -> Tensor:
        """A contiguous tensor at offset (bytes) in memory."""
        if memory.client is not self:
            raise ValueError("memory belongs to another client")
        return Tensor(memory, dtype, shape, offset)

    def owns(self, x: Any) -> bool:
        """Whether x (a Tensor, a numpy array or a torch tensor) lies in this client's memory."""
        return self._tensors.owns(x)

    # --- jobs -----------------------------------------------------------------------
    @property
    def ordered(self) -> bool:
        """Whether jobs on CUDA tensors are ordered on the caller's stream (GPU-side waits
        and signals), rather than by synchronising the stream on the host."""
        return self._runner.ordered

    @ordered.setter
    def ordered(self, on: bool) -> None:
        """False: synchronise the stream on the host before each job on CUDA tensors."""
        self._runner.enabled = bool(on)

    def synchronize(self) -> None:
        """Waits for every ordered job's reply (not for the stream); raises the first error."""
        self._runner.synchronize()

    def _set_tensors(self, p: Any, named: Sequence[Tuple[str, Any]]) -> bool:
        """Sets p's tensor fields from (field, tensor or None); whether any is on CUDA."""
        any_cuda = False
        for name, x in named:
            if x is None:
                continue
            st, cuda = self._tensors.struct(x)
            any_cuda |= cuda
            setattr(p, name, st)
        return any_cuda

    def attention(self, q: Any, k: Any, v: Any, out: Any, causal: bool = False,
                  scale: Optional[float] = None, lse: Any = None,
                  stream: Any = None, repeat: int = 1, *, window_left: int = -1,
                  window_right: int = -1, attention_chunk: int = 0,
                  logits_soft_cap: float = 0.0, alibi_slopes: Any = None,
                  sinks: Any = None) -> "JobResult | Job":
        """out = softmax(scale * Q K^T + mask) V, with Q [B, Hq, Sq, Dqk], K [B, Hkv, Skv,
        Dqk], V [B, Hkv, Skv, Dv] and out [B, Hq, Sq, Dv] (Hq a multiple of Hkv; Dv = Dqk,
        or below it where mode_caps("dense") has "head_dim_v"), one dtype; lse (optional)
        f32 [B, Hq, Sq]. causal: query i sees keys j <= i + Skv - Sq. scale: default
        1/sqrt(Dqk). repeat (benchmarks, 1 to 100): the kernel runs that many times back to
        back, kernel_ns one run's mean.
        Tensors are gllm Tensors, numpy views of this client's arenas, or torch tensors from
        Client.torch_tensor.

        Variants (keyword only, each default "none"; gllm.h's gllm_attention_variant, which
        every attention call takes): window_left, window_right: query i sees keys j with
        i - window_left <= j <= i + window_right (-1: no edge on that side);
        attention_chunk c > 0: only keys of the query's chunk (i // c == j // c);
        logits_soft_cap cap > 0: a score s becomes cap * tanh(s / cap); alibi_slopes (f32
        [Hq], in gllm memory): slope[h] * (j - i) is added to the scores; sinks (f32 [Hq]): a
        virtual key of logit sinks[h] and value zero joins every row's softmax. Positions
        are aligned bottom-right, as causal's (query row r is at i = r + Skv - Sq). A row
        that sees no key is zeros, its lse -inf (sinks[h] with sinks). A field the mode
        does not compute (mode_caps) raises VariantError before anything runs."""
        p = _lib.sized(_lib.GllmAttentionParams)
        any_cuda = self._set_tensors(p, (("q", q), ("k", k), ("v", v), ("out", out),
                                         ("lse", lse)))
        any_cuda |= set_variant(p, self._tensors.struct, "gllm_attention", window_left,
                                window_right, attention_chunk, logits_soft_cap, alibi_slopes,
                                sinks)
        if causal:
            p.flags |= _lib.ATTN_CAUSAL
        if scale is not None:
            p.flags |= _lib.ATTN_SCALE
            p.scale = float(scale)
        if lse is not None:
            p.flags |= _lib.ATTN_LSE
        p.repeat = repeat
        return self._runner.run([("gllm_attention", p)], any_cuda, stream)

    def kv_append(self, kv: PagedKV, k: Any, v: Any, append_indptr: Any,
                  stream: Any = None) -> "JobResult | Job":
        """Writes new tokens' K and V ([N, Hkv, D]) into the cache: tokens append_indptr[b] ..
        append_indptr[b + 1] become the last tokens of sequence b, whose page table (kv)
        already counts them."""
        p, any_cuda = self._append_params(kv, k, v, append_indptr)
        return self._runner.run([("gllm_kv_append", p)], any_cuda, stream)

    def _append_params(self, kv: PagedKV, k: Any, v: Any, append_indptr: Any) -> Tuple[Any, bool]:
        p = _lib.sized(_lib.GllmKVAppendParams)
        p.kv, cuda_kv = self._tensors.paged_kv(kv)
        any_cuda = self._set_tensors(p, (("k", k), ("v", v), ("append_indptr", append_indptr)))
        return p, any_cuda or cuda_kv

    def append_attention(self, kv: PagedKV, k: Any, v: Any, append_indptr: Any, q: Any,
                         out: Any, qo_indptr: Any = None, scale: Optional[float] = None,
                         stream: Any = None, **variant: Any) -> "JobResult | Job":
        """kv_append, then attention_decode (qo_indptr None) or attention_prefill over the
        same cache, as one run: on CUDA tensors one wait on the stream before the append and
        one signal after the attention, so a layer costs the stream a single round trip
        through gllmd. Returns the attention's result (or Job). variant: the keywords of
        attention_decode and attention_prefill."""
        name = "gllm_attention_decode" if qo_indptr is None else "gllm_attention_prefill"
        a, cuda_a = self._append_params(kv, k, v, append_indptr)
        p, cuda_p = self._paged_params(name, kv, q, out, qo_indptr, scale, variant)
        return self._runner.run([("gllm_kv_append", a), (name, p)], cuda_a or cuda_p, stream)

    def _paged_params(self, name: str, kv: PagedKV, q: Any, out: Any, qo_indptr: Any,
                      scale: Optional[float], variant: Dict[str, Any]) -> Tuple[Any, bool]:
        p = _lib.sized(_lib.GllmPagedAttentionParams)
        p.kv, cuda_kv = self._tensors.paged_kv(kv)
        any_cuda = self._set_tensors(p, (("q", q), ("out", out), ("qo_indptr", qo_indptr)))
        any_cuda |= set_variant(p, self._tensors.struct, name, **variant)
        if scale is not None:
            p.flags |= _lib.ATTN_SCALE
            p.scale = float(scale)
        return p, any_cuda or cuda_kv

    def attention_decode(self, kv: PagedKV, q: Any, out: Any, scale: Optional[float] = None,
                         stream: Any = None, *, window_left: int = -1,
                         window_right: int = -1, attention_chunk: int = 0,
                         logits_soft_cap: float = 0.0, alibi_slopes: Any = None,
                         sinks: Any = None) -> "JobResult | Job":
        """Decode over a paged cache: q [B, Hq, Dqk] and out [B, Hq, Dv] (v_cache's head
        dim), one query per sequence, its last token: it sees all of the sequence unless a
        variant (as Client.attention's) masks some."""
        p, any_cuda = self._paged_params(
            "gllm_attention_decode", kv, q, out, None, scale,
            dict(window_left=window_left, window_right=window_right,
                 attention_chunk=attention_chunk, logits_soft_cap=logits_soft_cap,
                 alibi_slopes=alibi_slopes, sinks=sinks))
        return self._runner.run([("gllm_attention_decode", p)], any_cuda, stream)

    def attention_prefill(self, kv: PagedKV, q: Any, out: Any, qo_indptr: Any,
                          scale: Optional[float] = None, stream: Any = None, *,
                          window_left: int = -1, window_right: int = -1,
                          attention_chunk: int = 0, logits_soft_cap: float = 0.0,
                          alibi_slopes: Any = None, sinks: Any = None) -> "JobResult | Job":
        """Chunked prefill over a paged cache: q [N, Hq, Dqk] and out [N, Hq, Dv]; queries
        qo_indptr[b] .. qo_indptr[b + 1] are the last tokens of sequence b (already
        appended) and attend causally to its cached prefix and to each other, within the
        masks of the variant (as Client.attention's)."""
        p, any_cuda = self._paged_params(
            "gllm_attention_prefill", kv, q, out, qo_indptr, scale,
            dict(window_left=window_left, window_right=window_right,
                 attention_chunk=attention_chunk, logits_soft_cap=logits_soft_cap,
                 alibi_slopes=alibi_slopes, sinks=sinks))
        return self._runner.run([("gllm_attention_prefill", p)], any_cuda, stream)

    def paged_kv_cache(self, num_pages: int, page_size: int, num_kv_heads: int,
                       head_dim: int, dtype: Any, max_batch: int = 64,
                       memory: str = "device", num_layers: int = 1,
                       head_dim_v: Optional[int] = None) -> "PagedKVCache":
        """A PagedKVCache whose pools (one K and one V per layer) live in memory "device",
        "shared" or "arena"; head_dim_v: V's head dim where it is below K's."""
        from .paged import PagedKVCache
        return PagedKVCache(self, num_pages, page_size, num_kv_heads, head_dim, dtype,
                            max_batch=max_batch, memory=memory, num_layers=num_layers,
                            head_dim_v=head_dim_v)

    # --- torch ----------------------------------------------------------------------
    def torch_tensor(self, shape: Sequence[int], dtype: Any, device: Any = None) -> Any:
        """A torch tensor in gllmd-shared memory (gllm_memory_create_shared +
        gllm_memory_map): a CUDA tensor on the CUDA backend (device: a torch device or
        index; the current one by default), a CPU tensor on the CPU backend (share "memfd").
        Pass it to attention() and the paged calls as is. Its memory lives as long as the
        tensor (and any view of it)."""
        from .torch_interop import shared_tensor
        return shared_tensor(self, shape, dtype, device)


def find_client(*tensors: Any) -> Client:
    """The open client whose memory holds the first of tensors that is gllm's."""
    for x in tensors:
        if x is None:
            continue
        if isinstance(x, Tensor):
            return x.memory.client
        for c in list(_clients):
            if not c.closed and c.owns(x):
                return c
    raise ValueError("none of these tensors lies in memory of an open gllm client")


def attention(q: Any, k: Any, v: Any, out: Any, causal: bool = False, scale: Optional[float] = None,
              lse: Any = None, stream: Any = None, repeat: int = 1, *, window_left: int = -1,
              window_right: int = -1, attention_chunk: int = 0, logits_soft_cap: float = 0.0,
              alibi_slopes: Any = None, sinks: Any = None) -> "JobResult | Job":
    """Client.attention on the client whose memory holds q (or the first of the tensors
    that is in gllm memory)."""
    return find_client(q, k, v, out).attention(
        q, k, v, out, causal=causal, scale=scale, lse=lse, stream=stream, repeat=repeat,
        window_left=window_left, window_right=window_right, attention_chunk=attention_chunk,
        logits_soft_cap=logits_soft_cap, alibi_slopes=alibi_slopes, sinks=sinks)


def connect(socket: Optional[str] = None) -> Client:
    """Connects to gllmd at socket (None: $GLLM_SOCKET, then the default path)."""
    return Client(socket)
