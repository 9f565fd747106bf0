"""gllm's error codes (include/gllm/errors.h) as Python exceptions carrying the daemon's message."""
from __future__ import annotations

from typing import Dict, Optional, Type

# The codes of GLLM_ERROR_MAP, stable by the header's promise (python/tests/test_layout.py
# checks this table against the header and against the library's gllm_error_name).
CODES: Dict[str, int] = {
    "MALFORMED": -1000, "TOOBIG": -1001, "LIMIT": -1002, "METHOD": -1003, "PARAM": -1004,
    "VERSION": -1005, "NOHELLO": -1006, "NOARENA": -1007, "UNSEALED": -1008,
    "NOTMEMFD": -1009, "ARENASIZE": -1010, "BOUNDS": -1011, "OVERFLOW": -1012,
    "SHAPE": -1013, "DTYPE": -1014, "HEADDIM": -1015, "BUSY": -1016, "SHUTDOWN": -1017,
    "BACKEND": -1018, "NOFD": -1019, "DISCONNECTED": -1020, "NOJOB": -1021, "QUOTA": -1022,
    "ALIAS": -1023, "DEVMEM": -1024, "DENIED": -1025, "NOTEXPORT": -1026,
    "WAITTIMEOUT": -1027, "DEVLOST": -1028, "JOBTIMEOUT": -1029, "VARIANT": -1030,
}


class Error(Exception):
    """A failed gllm call.

    code: the negative code the C library returned (a GLLM_E* code or a negative errno);
    name: its name ("GLLM_ESHAPE", "EINVAL");
    message: the daemon's message for the failure ("" when the daemon sent none, for
    example when the library refused the call itself)."""

    def __init__(self, code: int, name: str, description: str, message: str = "",
                 call: str = ""):
        self.code = code
        self.name = name
        self.description = description
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        detail = message if message else description
        super().__init__(f"{where}{name}: {detail}")


class ParamError(Error, ValueError):
    """GLLM_EPARAM: a missing, mistyped or out-of-range parameter."""


class ShapeError(Error, ValueError):
    """GLLM_ESHAPE: tensor shapes do not match."""


class DTypeError(Error, TypeError):
    """GLLM_EDTYPE: an unsupported or mismatched dtype."""


class HeadDimError(Error, ValueError):
    """GLLM_EHEADDIM: an unsupported head dimension."""


class BoundsError(Error, IndexError):
    """GLLM_EBOUNDS: a tensor (or a page number) lies outside its memory."""


class OverflowError_(Error, OverflowError):
    """GLLM_EOVERFLOW: a tensor shape or offset overflows."""


class AliasError(Error, ValueError):
    """GLLM_EALIAS: the output tensor overlaps an input."""


class BusyError(Error):
    """GLLM_EBUSY: too many requests in flight; retry later."""


class QuotaError(Error):
    """GLLM_EQUOTA: the session's resource limit (memory, arenas) is reached."""


class LimitError(Error):
    """GLLM_ETOOBIG or GLLM_ELIMIT: a message exceeds a size, length or nesting limit."""


class DeviceMemoryError(Error, MemoryError):
    """GLLM_EDEVMEM: the device is out of memory."""


class DisconnectedError(Error, ConnectionError):
    """GLLM_EDISCONNECTED or GLLM_ESHUTDOWN: the connection to gllmd is gone or closing."""


class DeniedError(Error, PermissionError):
    """GLLM_EDENIED: not allowed by the daemon's access policy."""


class BackendError(Error):
    """GLLM_EBACKEND: the backend (GPU driver, ...) failed."""


class NotExportError(Error, ValueError):
    """GLLM_ENOTEXPORT, GLLM_EUNSEALED, GLLM_ENOTMEMFD, GLLM_EARENASIZE: memory handed to
    gllmd is not what it must be."""


class WaitTimeoutError(Error, TimeoutError):
    """GLLM_EWAITTIMEOUT: a job's wait counter was not raised before its deadline."""


class DeviceLostError(Error):
    """GLLM_EDEVLOST: the device was lost to a fault (on CUDA gllmd restarts: connect again);
    tensors made before it are gone and must be made again."""


class JobTimeoutError(Error, TimeoutError):
    """GLLM_EJOBTIMEOUT: the job ran past gllmd's watchdog; its device was lost as with DEVLOST."""


class VariantError(Error):
    """GLLM_EVARIANT: the backend does not compute an attention variant field the job sets
    in its mode (Client.mode_caps says which it does); the job was refused, not run without
    it. The message names the field."""


class NotSupportedError(Error):
    """-EOPNOTSUPP: the daemon's backend does not offer this (for example shared memory)."""


_BY_NAME: Dict[str, Type[Error]] = {
    "PARAM": ParamError, "SHAPE": ShapeError, "DTYPE": DTypeError, "HEADDIM": HeadDimError,
    "BOUNDS": BoundsError, "OVERFLOW": OverflowError_, "ALIAS": AliasError,
    "BUSY": BusyError, "QUOTA": QuotaError, "TOOBIG": LimitError, "LIMIT": LimitError,
    "DEVMEM": DeviceMemoryError, "DISCONNECTED": DisconnectedError,
    "SHUTDOWN": DisconnectedError, "DENIED": DeniedError, "BACKEND": BackendError,
    "NOTEXPORT": NotExportError, "UNSEALED": NotExportError, "NOTMEMFD": NotExportError,
    "ARENASIZE": NotExportError, "WAITTIMEOUT": WaitTimeoutError, "DEVLOST": DeviceLostError,
    "JOBTIMEOUT": JobTimeoutError, "VARIANT": VariantError,
}
_BY_CODE: Dict[int, Type[Error]] = {CODES[n]: cls for n, cls in _BY_NAME.items()}
_EOPNOTSUPP = -95


def error_class(code: int) -> Type[Error]:
    """The exception class for a negative code."""
    if code == _EOPNOTSUPP:
        return NotSupportedError
    return _BY_CODE.get(code, Error)


def from_code(code: int, call: str = "", message: Optional[str] = None) -> Error:
    """The exception for code, named and described by the library."""
    from . import _lib
    lib = _lib.lib()
    name = _lib.text(lib.gllm_error_name(code))
    description = _lib.text(lib.gllm_strerror(code))
    return error_class(code)(code, name, description, message or "", call)
