"""The gllm_client handle and its lock: calling the library and raising its errors.

Internal to the package: Client, Memory and the job runner share one Connection, and this
narrow object is all that Memory and the runner see of the client."""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, List, Optional

from . import _lib, errors


class Connection:
    """One connection's handle, the lock that serialises calls on it, and the calls."""

    def __init__(self, socket: Optional[str]):
        # Re-entrant: a call made under the lock (a job run) makes calls of its own.
        self.lock = threading.RLock()
        self._handle: Optional[int] = None
        # Called with a Memory as it is released (the tensor resolver drops its structs).
        self.release_hooks: List[Callable[[Any], None]] = []
        h = ctypes.c_void_p()
        path = socket.encode() if isinstance(socket, str) else socket
        r = _lib.lib().gllm_connect(path, ctypes.byref(h))
        if r < 0:
            raise errors.from_code(r, f"connect({socket or 'default socket'})")
        self._handle = h.value

    @property
    def closed(self) -> bool:
        return self._handle is None

    @property
    def handle(self) -> int:
        """The gllm_client * as an integer; DisconnectedError once closed."""
        if self._handle is None:
            raise errors.DisconnectedError(errors.CODES["DISCONNECTED"], "GLLM_EDISCONNECTED",
                                           "connection to gllmd closed", "client is closed")
        return self._handle

    def disconnect(self) -> None:
        """gllm_disconnect, once."""
        with self.lock:
            h, self._handle = self._handle, None
            if h is not None:
                _lib.lib().gllm_disconnect(h)

    def last_message(self) -> str:
        """The daemon's message for the last failure ("" when closed or none)."""
        if self._handle is None:
            return ""
        return _lib.text(_lib.lib().gllm_client_last_error(self._handle))

    def clear_message(self) -> None:
        # The library keeps the daemon's last message until the next failure overwrites it;
        # clear it before each call so that a failure the library detects itself is not
        # reported with an older failure's message.
        p = _lib.lib().last_error_address(self.handle)
        if p:
            ctypes.memset(p, 0, 1)

    def check(self, name: str, r: int) -> int:
        """r, or the exception for it (named name, with the daemon's message) raised."""
        if r < 0:
            raise errors.from_code(r, name, self.last_message())
        return r

    def call(self, name: str, *args: Any) -> int:
        """Calls the C function name with this connection's handle first."""
        return self.call_plain(name, self.handle, *args)

    def call_plain(self, name: str, *args: Any) -> int:
        """Calls the C function name with args as they are, under the lock."""
        with self.lock:
            if self._handle is not None:
                self.clear_message()
            return self.check(name, getattr(_lib.lib(), name)(*args))

    def memory_released(self, memory: Any) -> None:
        """Memory calls it when it gives its handle back."""
        for hook in self.release_hooks:
            hook(memory)
