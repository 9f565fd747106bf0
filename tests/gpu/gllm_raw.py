"""A minimal gllmd client in Python, written from docs/PROTOCOL.md alone (msgpack + numpy)."""
import fcntl
import mmap
import os
import socket

import msgpack
import numpy as np

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}  # bf16 travels as raw bits


class GllmError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class Arena:
    def __init__(self, client, size):
        self.size = size
        self.fd = os.memfd_create("gllm-arena", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        self.map = mmap.mmap(self.fd, size)
        self.id = client.call("arena_register", {"size": size}, fd=self.fd)["arena"]
        self.client = client
        os.close(self.fd)

    def release(self):
        """Gives the arena back to gllmd (a connection holds a bounded number); this
        process's mapping goes when the last view of it does."""
        self.client.call("arena_release", {"arena": self.id})

    def view(self, offset, dtype, shape):
        n = int(np.prod(shape))
        return np.frombuffer(self.map, dtype=DTYPES[dtype], count=n, offset=offset).reshape(shape)


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.next_id = 0
        self.caps = self.call("hello", {"version": 1, "client": "gllm_raw.py"})

    def send(self, method, params, fd=None):
        self.next_id += 1
        data = msgpack.packb([0, self.next_id, method, params])
        if fd is None:
            self.sock.send(data)
        else:
            socket.send_fds(self.sock, [data], [fd])
        return self.next_id

    def recv(self):
        kind, rid, err, result = msgpack.unpackb(self.sock.recv(65536), raw=False)
        assert kind == 1
        return rid, err, result

    def call(self, method, params, fd=None):
        rid = self.send(method, params, fd)
        got, err, result = self.recv()
        assert got == rid, (got, rid)
        if err:
            raise GllmError(err["code"], err["message"])
        return result

    @staticmethod
    def tensor(arena, offset, dtype, shape, strides=None):
        t = {"arena": arena.id, "offset": offset, "dtype": dtype, "shape": list(shape)}
        if strides is not None:
            t["strides"] = list(strides)
        return t


def small_prefill(client):
    """A small attention job (B1 H1 S128 D64 f16, not causal) in an arena of its own: q, k and
    v random, out NaN. Returns the arena, the job's params and out's view."""
    shape = (1, 1, 128, 64)
    n = int(np.prod(shape)) * 2
    arena = Arena(client, 4 * n + 4096)
    for i in range(3):
        arena.view(i * n, "f16", shape)[...] = np.random.default_rng(i).standard_normal(shape)
    out = arena.view(3 * n, "f16", shape)
    out[...] = np.nan
    params = {name: Client.tensor(arena, i * n, "f16", shape) for i, name in enumerate("qkv")}
    params["out"] = Client.tensor(arena, 3 * n, "f16", shape)
    params["causal"] = False
    return arena, params, out
