"""ctypes declarations of libgllm-client's public C API (include/gllm/gllm.h) and how the
library is found. The structs here must match the header byte for byte:
python/tests/test_layout.py compiles a C program against the header and compares."""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from ctypes import (POINTER, c_char, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)
from typing import Optional

MAX_RANK = 8

# enum gllm_memory_kind
MEMORY_ARENA = 1
MEMORY_DEVICE = 2
MEMORY_SHARED = 3

# Attention flags (GLLM_ATTN_*)
ATTN_CAUSAL = 1 << 0
ATTN_SCALE = 1 << 1
ATTN_LSE = 1 << 2
ATTN_WINDOW = 1 << 3

# enum gllm_mode
MODE_DENSE = 0
MODE_DECODE = 1
MODE_PREFILL = 2
MODE_COUNT = 3

# The variant fields a mode computes (GLLM_VARIANT_*)
VARIANT_WINDOW = 1 << 0
VARIANT_CHUNK = 1 << 1
VARIANT_SOFT_CAP = 1 << 2
VARIANT_ALIBI = 1 << 3
VARIANT_SINKS = 1 << 4
VARIANT_HEAD_DIM_V = 1 << 5
MAX_MODE_HEAD_DIMS = 16


class GllmTensor(ctypes.Structure):
    _fields_ = [("memory", c_void_p), ("offset", c_uint64), ("dtype", c_int), ("rank", c_int),
                ("shape", c_int64 * MAX_RANK), ("strides", c_int64 * MAX_RANK)]


class GllmDeviceInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("index", c_int), ("name", c_char * 96),
                ("kind", c_char * 16), ("memory_bytes", c_uint64), ("threads", c_int),
                ("cc_major", c_int), ("cc_minor", c_int), ("image", c_char * 32),
                ("process_pid", c_int)]


class GllmLimits(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("max_message_bytes", c_uint32), ("max_arenas", c_uint32),
                ("max_arena_bytes", c_uint64), ("max_device_bytes", c_uint64),
                ("max_device_bytes_total", c_uint64), ("max_inflight", c_uint32),
                ("max_inflight_total", c_uint32), ("max_elements", c_uint64),
                ("max_rank", c_uint32), ("max_head_dim", c_uint32),
                ("max_page_entries", c_uint32)]


class GllmCaps(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("protocol_version", c_int), ("daemon_version", c_char * 32),
                ("backend", c_char * 16), ("ndevices", c_int), ("dtypes", c_uint32),
                ("share", c_char * 16), ("share_granularity", c_uint64)]


class GllmClientInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("pid", c_int), ("uid", c_uint32), ("gid", c_uint32),
                ("comm", c_char * 16), ("arenas", c_uint32), ("arena_bytes", c_uint64),
                ("device_bytes", c_uint64), ("inflight", c_uint32),
                ("exported_bytes", c_uint64), ("imported_bytes", c_uint64)]


class GllmStatus(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("daemon_version", c_char * 32), ("backend", c_char * 16),
                ("uptime_s", c_double), ("clients", c_uint32), ("jobs_done", c_uint64),
                ("jobs_failed", c_uint64), ("jobs_inflight", c_uint64),
                ("bytes_mapped", c_uint64), ("arenas", c_uint32), ("device_bytes", c_uint64),
                ("dtensors", c_uint32), ("requests", c_uint64), ("ring_requests", c_uint64),
                ("errors", c_uint64), ("limit_violations", c_uint64), ("nlisted", c_int),
                ("exported_bytes", c_uint64), ("imported_bytes", c_uint64)]


class GllmCounter(ctypes.Structure):
    _fields_ = [("memory", c_void_p), ("offset", c_uint64), ("value", c_uint32),
                ("timeout_ms", c_uint32)]


class GllmAttentionVariant(ctypes.Structure):
    _fields_ = [("window_left", c_int32), ("window_right", c_int32),
                ("attention_chunk", c_uint32), ("logits_soft_cap", c_float),
                ("alibi_slopes", GllmTensor), ("sinks", GllmTensor)]


class GllmAttentionParams(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("flags", c_uint32), ("scale", c_float),
                ("q", GllmTensor), ("k", GllmTensor), ("v", GllmTensor), ("out", GllmTensor),
                ("lse", GllmTensor), ("wait", GllmCounter), ("signal", GllmCounter),
                ("repeat", c_uint32), ("variant", GllmAttentionVariant)]


class GllmJobResult(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("status", c_int), ("kernel_ns", c_uint64),
                ("queue_ns", c_uint64), ("job_ns", c_uint64), ("copy_ns", c_uint64),
                ("copy_bytes", c_uint64), ("accept_ns", c_uint64)]


class GllmPagedKV(ctypes.Structure):
    _fields_ = [("k_cache", GllmTensor), ("v_cache", GllmTensor), ("indptr", GllmTensor),
                ("indices", GllmTensor), ("last_page_len", GllmTensor)]


class GllmKVAppendParams(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("kv", GllmPagedKV), ("k", GllmTensor), ("v", GllmTensor),
                ("append_indptr", GllmTensor), ("wait", GllmCounter), ("signal", GllmCounter)]


class GllmPagedAttentionParams(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("flags", c_uint32), ("scale", c_float), ("kv", GllmPagedKV),
                ("q", GllmTensor), ("out", GllmTensor), ("qo_indptr", GllmTensor),
                ("wait", GllmCounter), ("signal", GllmCounter),
                ("variant", GllmAttentionVariant)]


class GllmModeCaps(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("variants", c_uint32), ("max_head_dim", c_int),
                ("nhead_dims", c_int), ("head_dims", c_int * MAX_MODE_HEAD_DIMS)]


# Every struct the layout test checks, by its C name.
STRUCTS = {
    "gllm_tensor": GllmTensor,
    "gllm_device_info": GllmDeviceInfo,
    "gllm_limits": GllmLimits,
    "gllm_caps": GllmCaps,
    "gllm_client_info": GllmClientInfo,
    "gllm_status": GllmStatus,
    "gllm_attention_variant": GllmAttentionVariant,
    "gllm_attention_params": GllmAttentionParams,
    "gllm_job_result": GllmJobResult,
    "gllm_paged_kv": GllmPagedKV,
    "gllm_kv_append_params": GllmKVAppendParams,
    "gllm_paged_attention_params": GllmPagedAttentionParams,
    "gllm_mode_caps": GllmModeCaps,
}


def sized(struct_type):
    """A zeroed instance of a struct that starts with `size_t size`, its size set."""
    s = struct_type()
    s.size = ctypes.sizeof(struct_type)
    return s


_P = c_void_p   # gllm_client *, gllm_memory *: opaque
_PROTOTYPES = {
    "gllm_connect": (c_int, [c_char_p, POINTER(_P)]),
    "gllm_disconnect": (None, [_P]),
    "gllm_default_socket_path": (c_int, [c_char_p, c_size_t]),
    "gllm_client_caps": (c_int, [_P, POINTER(GllmCaps)]),
    "gllm_client_limits": (c_int, [_P, POINTER(GllmLimits)]),
    "gllm_client_device": (c_int, [_P, c_int, POINTER(GllmDeviceInfo)]),
    "gllm_client_fd": (c_int, [_P]),
    "gllm_status_get": (c_int, [_P, POINTER(GllmStatus)]),
    "gllm_status_client": (c_int, [_P, c_int, POINTER(GllmClientInfo)]),
    "gllm_arena_create": (c_int, [_P, c_size_t, POINTER(_P)]),
    "gllm_dtensor_create": (c_int, [_P, c_size_t, c_int, POINTER(_P)]),
    "gllm_memory_release": (c_int, [_P]),
    "gllm_memory_kind_of": (c_int, [_P]),
    "gllm_memory_data": (c_void_p, [_P]),
    "gllm_memory_size": (c_size_t, [_P]),
    "gllm_memory_create_shared": (c_int, [_P, c_size_t, c_int, POINTER(_P)]),
    "gllm_memory_import": (c_int, [_P, c_int, c_size_t, c_int, POINTER(_P)]),
    "gllm_memory_map": (c_int, [_P, POINTER(c_void_p)]),
    "gllm_memory_copy": (c_int, [_P, _P, c_uint64, _P, c_uint64, c_uint64]),
    "gllm_tensor_init": (c_int, [_P, c_uint64, c_int, c_int, POINTER(c_int64),
                                 POINTER(GllmTensor)]),
    "gllm_dtype_size": (c_size_t, [c_int]),
    "gllm_dtype_name": (c_char_p, [c_int]),
    "gllm_attention": (c_int, [_P, POINTER(GllmAttentionParams), POINTER(GllmJobResult)]),
    "gllm_kv_append": (c_int, [_P, POINTER(GllmKVAppendParams), POINTER(GllmJobResult)]),
    "gllm_attention_decode": (c_int, [_P, POINTER(GllmPagedAttentionParams),
                                      POINTER(GllmJobResult)]),
    "gllm_attention_prefill": (c_int, [_P, POINTER(GllmPagedAttentionParams),
                                       POINTER(GllmJobResult)]),
    "gllm_attention_submit": (c_int, [_P, POINTER(GllmAttentionParams), POINTER(c_uint64)]),
    "gllm_kv_append_submit": (c_int, [_P, POINTER(GllmKVAppendParams), POINTER(c_uint64)]),
    "gllm_attention_decode_submit": (c_int, [_P, POINTER(GllmPagedAttentionParams),
                                             POINTER(c_uint64)]),
    "gllm_attention_prefill_submit": (c_int, [_P, POINTER(GllmPagedAttentionParams),
                                              POINTER(c_uint64)]),
    "gllm_job_wait": (c_int, [_P, c_uint64, POINTER(GllmJobResult)]),
    "gllm_job_poll": (c_int, [_P, c_uint64, POINTER(GllmJobResult)]),
    "gllm_stream_order": (c_int, [_P, c_void_p, POINTER(GllmCounter), POINTER(GllmCounter)]),
    "gllm_stream_order_on": (c_int, [_P, c_void_p, c_int, POINTER(GllmCounter),
                                     POINTER(GllmCounter)]),
    "gllm_counter_write": (c_int, [POINTER(GllmCounter)]),
    "gllm_client_set_wait_spin": (None, [_P, c_uint32]),
    "gllm_client_last_error": (c_char_p, [_P]),
    "gllm_strerror": (c_char_p, [c_int]),
    "gllm_error_name": (c_char_p, [c_int]),
    "gllm_version": (c_char_p, []),
    "gllm_client_mode_caps": (c_int, [_P, c_int, POINTER(GllmModeCaps)]),
    "gllm_client_check_variant": (c_int, [_P, c_int, c_uint32, POINTER(GllmAttentionVariant),
                                          c_int64, c_int64]),
}
# Functions a library from before them lacks: declared when present, and has() says which.
# Without the variant functions the library also sends no variant, so the package refuses
# one rather than have an older library drop it silently.
_OPTIONAL = {"gllm_client_mode_caps", "gllm_client_check_variant"}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


class LibraryNotFound(OSError):
    """libgllm-client.so could not be found or opened."""


def _candidates():
    env = os.environ.get("GLLM_LIBRARY")
    if env:
        # An explicit choice is final: a wrong path is an error, not a cue to look elsewhere.
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libgllm-client.so", "libgllm-client.so.*"):
        yield from sorted(glob.glob(os.path.join(here, pattern)))
    found = ctypes.util.find_library("gllm-client")
    if found:
        yield found


def lib() -> ctypes.CDLL:
    """The loaded library, opened on first use: $GLLM_LIBRARY, then a copy in this package's
    directory, then the system's (ctypes.util.find_library("gllm-client"))."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for path in _candidates():
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                errors.append(f"{path}: {e}")
                continue
            for name, (restype, argtypes) in _PROTOTYPES.items():
                try:
                    fn = getattr(handle, name)
                except AttributeError:
                    if name in _OPTIONAL:
                        continue
                    raise
                fn.restype = restype
                fn.argtypes = argtypes
            # The same function returning the address itself (c_char_p would return a copy):
            # Client clears the message in place before each call.
            handle.last_error_address = ctypes.CFUNCTYPE(c_void_p, c_void_p)(
                ("gllm_client_last_error", handle))
            _lib, _lib_path = handle, path
            return handle
        tried = "; ".join(errors) if errors else "no candidate found"
        raise LibraryNotFound(
            "cannot load libgllm-client (set GLLM_LIBRARY to the path of libgllm-client.so): "
            + tried)


def has(name: str) -> bool:
    """Whether the loaded library has the C function name (the optional ones may be
    missing from an older library)."""
    return hasattr(lib(), name)


def library_path() -> str:
    """The path (or soname) the library was loaded from."""
    lib()
    assert _lib_path is not None
    return _lib_path


def text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""
