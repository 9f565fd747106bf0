"""pip installs the package from Debian's python3 alone (setuptools, no build isolation) and
the installed package finds libgllm-client: in its own directory, else the system's."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)

PROBE = ("import gllm, sys; c = gllm.connect(sys.argv[1]); "
         "print(gllm.library_path()); print(c.status().backend)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    for mod in ("pip", "setuptools"):
        if subprocess.run([sys.executable, "-c", f"import {mod}"]).returncode:
            pytest.skip(f"{sys.executable} has no {mod}: pip install not checked")
    d = tmp_path_factory.mktemp("install")
    src = d / "src"
    # a copy, so that the build's scratch (build/, *.egg-info) stays out of the source tree
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("tests", "examples", "build",
                                                            "*.egg-info", "__pycache__"))
    target = d / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                        "--no-build-isolation", "--no-deps", "--target", str(target), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return target


def _probe(target, socket, cwd, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("GLLM_LIBRARY", "PYTHONPATH")}
    e.update(env, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", PROBE, socket], capture_output=True, text=True,
                       env=e, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_installed_package_finds_the_library(installed, socket_path, tmp_path):
    lib = os.environ["GLLM_LIBRARY"]
    # the system's: ctypes.util.find_library, here through LD_LIBRARY_PATH
    path, backend = _probe(installed, socket_path, tmp_path,
                           LD_LIBRARY_PATH=os.path.dirname(lib))
    assert path.startswith("libgllm-client.so") and backend
    # a copy in the package's directory comes first
    copy = installed / "gllm" / "libgllm-client.so"
    shutil.copy(lib, copy)
    try:
        path, _ = _probe(installed, socket_path, tmp_path)
        assert path == str(copy)
    finally:
        copy.unlink()
    # GLLM_LIBRARY wins, and a wrong one is an error, not a cue to look elsewhere
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    e.update(PYTHONPATH=str(installed), GLLM_LIBRARY=str(tmp_path / "missing.so"))
    r = subprocess.run([sys.executable, "-c", PROBE, socket_path], capture_output=True,
                       text=True, env=e, cwd=tmp_path)
    assert r.returncode != 0 and "GLLM_LIBRARY" in r.stderr
