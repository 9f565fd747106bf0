"""A connection to gllmd: status, memory, and the attention jobs (dense and paged)."""
from __future__ import annotations

import ctypes
import dataclasses
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _lib, errors
from .dtypes import DType, as_dtype
from .memory import Memory, Tensor

# Every open client, so that module-level gllm.attention(...) can find the one that owns a
# tensor's memory.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@dataclasses.dataclass(frozen=True)
class Caps:
    """What the daemon announced when the client connected."""
    protocol_version: int
    daemon_version: str
    backend: str
    ndevices: int
    dtypes: Tuple[DType, ...]
    share: str                 # "memfd" (CPU backend), "cuda_vmm_fd" (CUDA), "" (none)
    share_granularity: int


@dataclasses.dataclass(frozen=True)
class Limits:
    max_message_bytes: int
    max_arenas: int
    max_arena_bytes: int
    max_device_bytes: int
    max_device_bytes_total: int
    max_inflight: int
    max_inflight_total: int
    max_elements: int
    max_rank: int
    max_head_dim: int
    max_page_entries: int


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    kind: str
    memory_bytes: int
    threads: int
    cc_major: int
    cc_minor: int
    image: str
    process_pid: int        # the device's own process (device_processes = on); 0: gllmd's


@dataclasses.dataclass(frozen=True)
class ClientInfo:
    pid: int
    uid: int
    gid: int
    comm: str
    arenas: int
    arena_bytes: int
    device_bytes: int
    inflight: int
    exported_bytes: int     # of device_bytes: gllmd's memory this client maps too
    imported_bytes: int     # of device_bytes: this client's own memory gllmd maps


@dataclasses.dataclass(frozen=True)
class Status:
    """The daemon's counters (gllm_status) and its first 64 clients."""
    daemon_version: str
    backend: str
    uptime_s: float
    clients: int
    jobs_done: int
    jobs_failed: int
    jobs_inflight: int
    bytes_mapped: int
    arenas: int
    device_bytes: int
    dtensors: int
    requests: int
    ring_requests: int
    errors: int
    limit_violations: int
    listed: Tuple[ClientInfo, ...]
    exported_bytes: int     # of device_bytes, shared with clients: gllmd's memory
    imported_bytes: int     # of device_bytes, shared with clients: theirs


@dataclasses.dataclass(frozen=True)
class JobResult:
    """Timings of one job (gllm_job_result), in nanoseconds."""
    kernel_ns: int
    queue_ns: int
    job_ns: int
    copy_ns: int
    copy_bytes: int
    accept_ns: int


class Job:
    """A job ordered on a CUDA stream (see Client): its reply, claimed on demand."""

    def __init__(self, client: "Client", job_id: int):
        self.client, self.id = client, job_id
        self._result: Optional[JobResult] = None
        self._raw: Any = None                # the claimed gllm_job_result, until result()
        self._error: Optional[BaseException] = None
        self.run: List["Job"] = [self]   # the last job of a run: every job of it, in order

    def result(self) -> JobResult:
        """Waits for gllmd's reply (not for the stream) and returns the job's timings;
        raises its error, or that of an earlier ordered job of the client claimed on the
        way (replies are claimed oldest first)."""
        c = self.client
        with c._lock:
            while not self.done() and self.id in c._pending:
                c._claim(c._pending[0], True)
        if self._error is not None:
            raise self._error
        if self._result is None and self._raw is not None:
            self._result, self._raw = _fields(self._raw, JobResult), None
        assert self._result is not None
        return self._result

    def done(self) -> bool:
        """Whether the reply has been claimed."""
        return self._result is not None or self._raw is not None or self._error is not None


@dataclasses.dataclass
class PagedKV:
    """A paged KV cache as gllm_paged_kv names it: K and V pools [pages, page_size, Hkv, D]
    and a FlashInfer page table (indptr [B + 1], indices, last_page_len [B], all int32)."""
    k_cache: Any
    v_cache: Any
    indptr: Any
    indices: Any
    last_page_len: Any


_FIELD_NAMES: Dict[type, Tuple[str, ...]] = {}


def _fields(struct: ctypes.Structure, cls: type, **extra: Any) -> Any:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    vals = {}
    for name in names:
        if name in extra:
            continue
        v = getattr(struct, name)
        vals[name] = _lib.text(v) if isinstance(v, bytes) else v
    vals.update(extra)
    return cls(**vals)


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


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
        self._lock = threading.RLock()
        self._memories: "weakref.WeakSet[Memory]" = weakref.WeakSet()
        # weak: a cached struct must not keep its memory (and a torch tensor's) alive
        self._structs: Dict[Any, Tuple[_lib.GllmTensor, "weakref.ref[Memory]"]] = {}
        # torch tensors by object: (the object, its address, strides and shape then, the
        # struct, CUDA-ness, its memory), all weak
        self._by_object: Dict[int, Tuple[Any, ...]] = {}
        self._handle: Optional[int] = None
        self._pending: List[int] = []          # ordered jobs whose replies are unclaimed
        self._jobs: Dict[int, "Job"] = {}      # their Jobs, until claimed
        self._ordered = True
        self._max_inflight: Optional[int] = None
        lib = _lib.lib()
        h = ctypes.c_void_p()
        path = socket.encode() if isinstance(socket, str) else socket
        r = lib.gllm_connect(path, ctypes.byref(h))
        if r < 0:
            raise errors.from_code(r, f"connect({socket or 'default socket'})")
        self._handle = h.value
        self.socket = socket
        caps = _lib.sized(_lib.GllmCaps)
        self._call("gllm_client_caps", lib.gllm_client_caps(self._handle, ctypes.byref(caps)))
        self._caps = _fields(caps, Caps, dtypes=tuple(d for d in DType if caps.dtypes & (1 << d)))
        _clients.add(self)

    # --- lifetime -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Disconnects. gllmd gives back this connection's memory; Memory objects still
        alive only free their handles when released."""
        with self._lock:
            if self._handle is not None:
                # Ordered jobs first: a stream may still wait on the library's counters,
                # which disconnecting frees. Their errors were the caller's to claim.
                while self._pending:
                    try:
                        self._claim(self._pending[0], True)
                    except errors.Error:
                        pass
            h, self._handle = self._handle, None
            if h is not None:
                _lib.lib().gllm_disconnect(h)
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
        if self._handle is None:
            raise errors.DisconnectedError(errors.CODES["DISCONNECTED"], "GLLM_EDISCONNECTED",
                                           "connection to gllmd closed", "client is closed")
        return self._handle

    # --- errors ---------------------------------------------------------------------
    def _clear_message(self) -> None:
        # The library keeps the daemon's last message until the next failure overwrites it;
        # clear it before each call so that a failure the library detects itself is not
        # reported with an older failure's message.
        p = _lib.lib().last_error_address(self.handle)
        if p:
            ctypes.memset(p, 0, 1)

    def _call(self, name: str, r: int) -> int:
        if r < 0:
            msg = ""
            if self._handle is not None:
                msg = _lib.text(_lib.lib().gllm_client_last_error(self._handle))
            raise errors.from_code(r, name, msg)
        return r

    def _run(self, name: str, *args: Any) -> int:
        """Calls the C function name with this client's handle first."""
        return self._run_plain(name, self.handle, *args)

    def _run_plain(self, name: str, *args: Any) -> int:
        """Calls the C function name with args as they are, under the lock."""
        with self._lock:
            if self._handle is not None:
                self._clear_message()
            return self._call(name, getattr(_lib.lib(), name)(*args))

    # --- what the daemon is ---------------------------------------------------------
    @property
    def caps(self) -> Caps:
        """What the daemon announced in hello."""
        return self._caps

    @property
    def limits(self) -> Limits:
        lim = _lib.sized(_lib.GllmLimits)
        self._run("gllm_client_limits", ctypes.byref(lim))
        return _fields(lim, Limits)

    @property
    def devices(self) -> List[DeviceInfo]:
        out = []
        for i in range(self._caps.ndevices):
            d = _lib.sized(_lib.GllmDeviceInfo)
            self._run("gllm_client_device", i, ctypes.byref(d))
            out.append(_fields(d, DeviceInfo))
        return out

    def status(self) -> Status:
        """The daemon's counters now, with its clients."""
        with self._lock:
            st = _lib.sized(_lib.GllmStatus)
            self._run("gllm_status_get", ctypes.byref(st))
            listed = []
            for i in range(st.nlisted):
                ci = _lib.sized(_lib.GllmClientInfo)
                self._run("gllm_status_client", i, ctypes.byref(ci))
                listed.append(_fields(ci, ClientInfo))
        return _fields(st, Status, listed=tuple(listed))

    def set_wait_spin(self, us: int) -> None:
        """How long job calls poll for the reply before sleeping (gllm_client_set_wait_spin)."""
        with self._lock:
            _lib.lib().gllm_client_set_wait_spin(self.handle, int(us))

    # --- memory ---------------------------------------------------------------------
    def _register(self, m: Memory) -> None:
        self._memories.add(m)

    def _unregister(self, m: Memory) -> None:
        self._memories.discard(m)
        for key in [k for k, (_, ref) in self._structs.items() if ref() in (m, None)]:
            del self._structs[key]

    def _new_memory(self, name: str, *args: Any, imported: bool = False) -> Memory:
        h = ctypes.c_void_p()
        self._run(name, *args, ctypes.byref(h))
        return Memory(self, h.value, imported=imported)

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
        self._run("gllm_memory_copy", dst.handle, int(dst_offset), src.handle,
                  int(src_offset), int(nbytes))

    def tensor(self, memory: Memory, dtype: Any, shape: Sequence[int], offset: int = 0) -> Tensor:
        """A contiguous tensor at offset (bytes) in memory."""
        if memory.client is not self:
            raise ValueError("memory belongs to another client")
        return Tensor(memory, dtype, shape, offset)

    def owns(self, x: Any) -> bool:
        """Whether x (a Tensor, a numpy array or a torch tensor) lies in this client's memory."""
        try:
            self._find(x)
            return True
        except (ValueError, TypeError):
            return False

    def _find(self, x: Any) -> Tuple[Tensor, bool]:
        """x as a Tensor of this client's memory, and whether it is a torch CUDA tensor."""
        if isinstance(x, Tensor):
            if x.memory.client is not self:
                raise ValueError("tensor belongs to another client")
            return x, False
        address, nbytes, shape, dtype, cuda = self._describe(x)
        for m in list(self._memories):
            if m._handle is not None and m.contains(address, max(nbytes, 1)):
                return Tensor(m, as_dtype(dtype), shape, m.offset_of(address)), cuda
        raise ValueError(f"tensor of shape {list(shape)} is not in gllm memory of this client "
                         "(allocate it with Client.arena().numpy() or Client.torch_tensor())")

    @staticmethod
    def _describe(x: Any) -> Tuple[int, int, Tuple[int, ...], Any, bool]:
        """Address, bytes, shape, dtype and CUDA-ness of a numpy array or torch tensor."""
        if _is_torch(x):
            if not x.is_contiguous():
                raise ValueError("gllm needs contiguous torch tensors")
            return (x.data_ptr(), x.numel() * x.element_size(), tuple(x.shape), x.dtype,
                    bool(x.is_cuda))
        if hasattr(x, "__array_interface__"):
            if not x.flags["C_CONTIGUOUS"]:
                raise ValueError("gllm needs C-contiguous numpy arrays")
            return x.__array_interface__["data"][0], x.nbytes, tuple(x.shape), x.dtype, False
        raise TypeError(f"not a tensor gllm can name: {type(x).__name__}")

    def _struct(self, x: Any) -> Tuple[_lib.GllmTensor, bool]:
        st, cuda, _ = self._struct_mem(x)
        return st, cuda

    def _struct_mem(self, x: Any) -> Tuple[_lib.GllmTensor, bool, Memory]:
        """The gllm_tensor naming x, and whether x is a torch CUDA tensor. Serving loops pass
        the same buffers step after step: their structs are kept, per memory, until the
        memory is released."""
        if isinstance(x, Tensor):
            st = x.__dict__.get("_c_struct")
            if st is None or x.memory._handle is None:
                t, _ = self._find(x)
                st = x._c_struct = t.c_struct()
            return st, False, x.memory
        # The fast path: the same array or tensor object as before, still over the same
        # bytes (describing a torch tensor or a numpy array costs several microseconds, which
        # a serving loop pays per tensor per layer). A numpy array never moves; a torch
        # tensor may (set_), so its address and strides are compared.
        seen = self._by_object.get(id(x))
        if seen is not None and seen[0]() is x and x.shape == seen[3] and \
                (seen[7] or (x.data_ptr() == seen[1] and x.stride() == seen[2])):
            mem = seen[6]()
            if mem is not None and mem._handle is not None:
                return seen[4], seen[5], mem
        torch_like = _is_torch(x)
        address, nbytes, shape, dtype, cuda = self._describe(x)
        key = (address, shape, dtype, cuda)
        hit = self._structs.get(key)
        if hit is not None and (hit[1]() is None or hit[1]()._handle is None):
            hit = None
        if hit is None:
            t, cuda = self._find(x)
            if len(self._structs) >= 4096:
                self._structs.clear()
            hit = self._structs[key] = (t.c_struct(), weakref.ref(t.memory))
        st, mem = hit[0], hit[1]()
        try:
            ref = weakref.ref(x)
        except TypeError:             # an object without weak references: no fast path
            return st, cuda, mem
        if len(self._by_object) >= 4096:
            self._by_object.clear()
        self._by_object[id(x)] = (ref, address, x.stride() if torch_like else None, x.shape,
                                  st, cuda, hit[1], not torch_like)
        return st, cuda, mem

    # --- jobs -----------------------------------------------------------------------
    @property
    def ordered(self) -> bool:
        """Whether jobs on CUDA tensors are ordered on the caller's stream (GPU-side waits
        and signals), rather than by synchronising the stream on the host."""
        return self._caps.share == "cuda_vmm_fd" and self._ordered

    @ordered.setter
    def ordered(self, on: bool) -> None:
        """False: synchronise the stream on the host before each job on CUDA tensors."""
        self._ordered = bool(on)

    @staticmethod
    def _stream_handle(stream: Any) -> Any:
        import torch
        s = stream if stream is not None else torch.cuda.current_stream()
        return s, s.cuda_stream

    def _job(self, name: str, params: Any, any_cuda: bool, stream: Any) -> Any:
        return self._run_jobs([(name, params)], any_cuda, stream)

    def _run_jobs(self, jobs: Sequence[Tuple[str, Any]], any_cuda: bool, stream: Any) -> Any:
        """Runs jobs in order: ordered on the stream as one run (the first waits for the
        stream, the last signals it) when they touch CUDA tensors and gllmd can order them;
        else synchronously, after synchronising the stream. Returns the last job's Job or
        JobResult."""
        if any_cuda and self.ordered:
            return self._ordered_run(jobs, stream)
        if stream is not None and hasattr(stream, "synchronize"):
            stream.synchronize()
        elif any_cuda:
            import torch
            torch.cuda.current_stream().synchronize()
        res = None
        for name, params in jobs:
            res = _lib.sized(_lib.GllmJobResult)
            self._run(name, ctypes.byref(params), ctypes.byref(res))
        return _fields(res, JobResult)

    def _ordered_run(self, jobs: Sequence[Tuple[str, Any]], stream: Any) -> "Job":
        lib = _lib.lib()
        s, handle = self._stream_handle(stream)
        with self._lock:
            self._reap(block=False)
            # gllmd refuses a job past max_inflight (BUSY) without writing its signal: the
            # stream would wait for ever. Stay within it.
            if self._max_inflight is None:
                self._max_inflight = self.limits.max_inflight   # hello's: fixed per connection
            room = self._max_inflight - len(jobs)
            while self._pending and len(self._pending) > room:
                self._claim(self._pending[0], True)
            wait, signal = _lib.GllmCounter(), _lib.GllmCounter()
            self._clear_message()
            # The run's device is its stream's: the wait's counter goes in that device's
            # memory, which its GPU polls faster than an arena.
            dev = getattr(getattr(s, "device", None), "index", None)
            self._call("gllm_stream_order_on", lib.gllm_stream_order_on(
                self.handle, handle, -1 if dev is None else int(dev), ctypes.byref(wait),
                ctypes.byref(signal)))
            jobs[0][1].wait = wait
            jobs[-1][1].signal = signal
            job = ctypes.c_uint64()
            run: List[Job] = []
            for name, params in jobs:
                r = getattr(lib, name + "_submit")(self.handle, ctypes.byref(params),
                                                   ctypes.byref(job))
                if r < 0:
                    # the stream waits for the run's signal: nothing will write it now
                    lib.gllm_counter_write(ctypes.byref(signal))
                    self._call(name, r)
                j = Job(self, job.value)
                run.append(j)
                self._pending.append(j.id)
                self._jobs[j.id] = j
            run[-1].run = run
            return run[-1]

    def _claim(self, job_id: int, block: bool) -> bool:
        """Claims one job's reply into its Job; False while it runs (block=False)."""
        lib = _lib.lib()
        res = _lib.sized(_lib.GllmJobResult)
        fn = lib.gllm_job_wait if block else lib.gllm_job_poll
        r = fn(self.handle, job_id, ctypes.byref(res))
        if r == -11 and not block:   # -EAGAIN: still running
            return False
        self._pending.remove(job_id)
        j = self._jobs.pop(job_id, None)
        if r < 0:
            err = errors.from_code(r, "job", _lib.text(lib.gllm_client_last_error(self.handle)))
            if j is not None:
                j._error = err
            raise err
        if j is not None:
            j._raw = res           # made into a JobResult when asked for
        return True

    def _reap(self, block: bool) -> None:
        """Claims finished ordered jobs, oldest first (a connection's jobs on a device finish
        in order); block: at least the oldest. Raises the first failure found."""
        first = True
        while self._pending:
            if not self._claim(self._pending[0], block and first):
                return
            first = False

    def synchronize(self) -> None:
        """Waits for every ordered job's reply (not for the stream); raises the first error."""
        with self._lock:
            while self._pending:
                self._claim(self._pending[0], True)

    def attention(self, q: Any, k: Any, v: Any, out: Any, causal: bool = False,
                  scale: Optional[float] = None, lse: Any = None,
                  stream: Any = None, repeat: int = 1) -> "JobResult | Job":
        """out = softmax(scale * Q K^T + mask) V, with Q and out [B, Hq, Sq, D], K and V
        [B, Hkv, Skv, D] (Hq a multiple of Hkv), one dtype; lse (optional) f32 [B, Hq, Sq].
        causal: query i sees keys j <= i + Skv - Sq. scale: default 1/sqrt(D). repeat
        (benchmarks, 1 to 100): the kernel runs that many times back to back, kernel_ns one
        run's mean.
        Tensors are gllm Tensors, numpy views of this client's arenas, or torch tensors from
        Client.torch_tensor."""
        p = _lib.sized(_lib.GllmAttentionParams)
        any_cuda = False
        for name, x in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
            if x is None:
                continue
            st, cuda = self._struct(x)
            any_cuda |= cuda
            setattr(p, name, st)
        if causal:
            p.flags |= _lib.ATTN_CAUSAL
        if scale is not None:
            p.flags |= _lib.ATTN_SCALE
            p.scale = float(scale)
        if lse is not None:
            p.flags |= _lib.ATTN_LSE
        p.repeat = repeat
        return self._job("gllm_attention", p, any_cuda, stream)

    def _paged_kv(self, kv: PagedKV) -> Tuple[_lib.GllmPagedKV, bool]:
        # A PagedKV names the same buffers every time (PagedKVCache makes a new one when its
        # table moves): its struct is kept on it while its memories live.
        cached = kv.__dict__.get("_gllm_struct")
        if cached is not None and cached[0] is self and \
                all(m._handle is not None for m in cached[3]):
            return cached[1], cached[2]
        s = _lib.GllmPagedKV()
        any_cuda = False
        mems = []
        for f in ("k_cache", "v_cache", "indptr", "indices", "last_page_len"):
            st, cuda, mem = self._struct_mem(getattr(kv, f))
            any_cuda |= cuda
            mems.append(mem)
            setattr(s, f, st)
        kv._gllm_struct = (self, s, any_cuda, mems)
        return s, any_cuda

    def kv_append(self, kv: PagedKV, k: Any, v: Any, append_indptr: Any,
                  stream: Any = None) -> "JobResult | Job":
        """Writes new tokens' K and V ([N, Hkv, D]) into the cache: tokens append_indptr[b] ..
        append_indptr[b + 1] become the last tokens of sequence b, whose page table (kv)
        already counts them."""
        p, any_cuda = self._append_params(kv, k, v, append_indptr)
        return self._job("gllm_kv_append", p, any_cuda, stream)

    def _append_params(self, kv: PagedKV, k: Any, v: Any, append_indptr: Any) -> Tuple[Any, bool]:
        p = _lib.sized(_lib.GllmKVAppendParams)
        p.kv, any_cuda = self._paged_kv(kv)
        for name, x in (("k", k), ("v", v), ("append_indptr", append_indptr)):
            st, cuda = self._struct(x)
            any_cuda |= cuda
            setattr(p, name, st)
        return p, any_cuda

    def append_attention(self, kv: PagedKV, k: Any, v: Any, append_indptr: Any, q: Any,
                         out: Any, qo_indptr: Any = None, scale: Optional[float] = None,
                         stream: Any = None) -> "JobResult | Job":
        """kv_append, then attention_decode (qo_indptr None) or attention_prefill over the
        same cache, as one run: on CUDA tensors one wait on the stream before the append and
        one signal after the attention, so a layer costs the stream a single round trip
        through gllmd. Returns the attention's result (or Job)."""
        a, cuda_a = self._append_params(kv, k, v, append_indptr)
        p, cuda_p = self._paged_params(kv, q, out, qo_indptr, scale)
        name = "gllm_attention_decode" if qo_indptr is None else "gllm_attention_prefill"
        return self._run_jobs([("gllm_kv_append", a), (name, p)], cuda_a or cuda_p, stream)

    def _paged_params(self, kv: PagedKV, q: Any, out: Any, qo_indptr: Any,
                      scale: Optional[float]) -> Tuple[Any, bool]:
        p = _lib.sized(_lib.GllmPagedAttentionParams)
        p.kv, any_cuda = self._paged_kv(kv)
        for name, x in (("q", q), ("out", out), ("qo_indptr", qo_indptr)):
            if x is None:
                continue
            st, cuda = self._struct(x)
            any_cuda |= cuda
            setattr(p, name, st)
        if scale is not None:
            p.flags |= _lib.ATTN_SCALE
            p.scale = float(scale)
        return p, any_cuda

    def attention_decode(self, kv: PagedKV, q: Any, out: Any, scale: Optional[float] = None,
                         stream: Any = None) -> "JobResult | Job":
        """Decode over a paged cache: q and out [B, Hq, D], one query per sequence, seeing
        all of it."""
        p, any_cuda = self._paged_params(kv, q, out, None, scale)
        return self._job("gllm_attention_decode", p, any_cuda, stream)

    def attention_prefill(self, kv: PagedKV, q: Any, out: Any, qo_indptr: Any,
                          scale: Optional[float] = None, stream: Any = None) -> "JobResult | Job":
        """Chunked prefill over a paged cache: q and out [N, Hq, D]; queries qo_indptr[b] ..
        qo_indptr[b + 1] are the last tokens of sequence b (already appended) and attend
        causally to its cached prefix and to each other."""
        p, any_cuda = self._paged_params(kv, q, out, qo_indptr, scale)
        return self._job("gllm_attention_prefill", p, any_cuda, stream)

    def paged_kv_cache(self, num_pages: int, page_size: int, num_kv_heads: int,
                       head_dim: int, dtype: Any, max_batch: int = 64,
                       memory: str = "device", num_layers: int = 1) -> "PagedKVCache":
        """A PagedKVCache whose pools (one K and one V per layer) live in memory "device",
        "shared" or "arena"."""
        from .paged import PagedKVCache
        return PagedKVCache(self, num_pages, page_size, num_kv_heads, head_dim, dtype,
                            max_batch=max_batch, memory=memory, num_layers=num_layers)

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
              lse: Any = None, stream: Any = None, repeat: int = 1) -> "JobResult | Job":
    """Client.attention on the client whose memory holds q."""
    return find_client(q, k, v, out).attention(q, k, v, out, causal=causal, scale=scale,
                                               lse=lse, stream=stream, repeat=repeat)


def connect(socket: Optional[str] = None) -> Client:
    """Connects to gllmd at socket (None: $GLLM_SOCKET, then the default path)."""
    return Client(socket)
