"""Fixtures: a gllmd of the build tree (CPU backend) on a temporary socket, and clients of it.

GLLMD_PATH names the gllmd to start and GLLM_LIBRARY the libgllm-client.so to load; both
default to the repository's build/ tree. GLLM_TEST_SOCKET instead runs the tests against a
daemon that is already running there (the GPU machine)."""
import os
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))          # the package from this source tree

_build_lib = os.path.join(REPO, "build", "libgllm-client.so")
if not os.environ.get("GLLM_LIBRARY") and os.path.exists(_build_lib):
    os.environ["GLLM_LIBRARY"] = _build_lib

import gllm  # noqa: E402


def _start(path, socket, conf):
    proc = subprocess.Popen([path, "--socket", socket, "--config", conf, "--backend", "cpu",
                             "--threads", "2"], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gllmd exited with status {proc.returncode}")
        if os.path.exists(socket):
            try:
                gllm.connect(socket).close()
                return proc
            except gllm.Error:
                pass
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError("gllmd did not answer on its socket within 20 s")


@pytest.fixture(scope="session")
def socket_path():
    external = os.environ.get("GLLM_TEST_SOCKET")
    if external:
        yield external
        return
    gllmd = os.environ.get("GLLMD_PATH") or os.path.join(REPO, "build", "gllmd")
    if not os.access(gllmd, os.X_OK):
        pytest.fail(f"no gllmd at {gllmd}: build the tree or set GLLMD_PATH")
    with tempfile.TemporaryDirectory(prefix="gllm-py-") as d:
        sock = os.path.join(d, "gllmd.sock")
        conf = os.path.join(d, "gllmd.conf")
        with open(conf, "w") as f:
            f.write("# the defaults\n")
        proc = _start(gllmd, sock, conf)
        try:
            yield sock
        finally:
            proc.terminate()
            try:
                assert proc.wait(timeout=20) == 0, "gllmd did not exit cleanly"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise


@pytest.fixture
def client(socket_path):
    with gllm.connect(socket_path) as c:
        yield c
