"""The plain records the client returns (frozen dataclasses of gllm_caps, gllm_limits, ...)
and PagedKV, the tensors of a paged cache as gllm_paged_kv names them."""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, Dict, Tuple

from . import _lib
from .dtypes import DType


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


@dataclasses.dataclass
class PagedKV:
    """A paged KV cache as gllm_paged_kv names it: K and V pools [pages, page_size, Hkv, D]
    (V's head dim may be below K's) and a FlashInfer page table (indptr [B + 1], indices,
    last_page_len [B], all int32)."""
    k_cache: Any
    v_cache: Any
    indptr: Any
    indices: Any
    last_page_len: Any


_FIELD_NAMES: Dict[type, Tuple[str, ...]] = {}


def from_struct(struct: ctypes.Structure, cls: type, **extra: Any) -> Any:
    """A cls (one of the dataclasses above) from the C struct's fields of the same names;
    char arrays become str, and extra gives the fields that need converting."""
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
