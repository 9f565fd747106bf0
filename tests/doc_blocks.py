#!/usr/bin/env python3
"""Runs every fenced code block of the documents named, against a CPU gllmd of the build.

A block's language decides how: ``python`` blocks of one document run in order in one
interpreter (a later block sees the names an earlier one made), ``c`` blocks are compiled
against the build's libgllm-client and run, ``sh`` blocks run under ``bash -e`` in a scratch
directory whose ``build`` is the build directory (and ``python`` a copy of the package). A block that cannot run here says why on
the line before it, ``<!-- doc-test: skip: REASON -->`` (the reason is required); blocks
without a language (synopses, output) are text. Any other language fails: a new kind of
block needs a way to run it here first.

Usage: doc_blocks.py BUILD_DIR SOURCE_DIR DOC.md...
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
SKIP = re.compile(r"^<!--\s*doc-test:\s*skip:\s*(\S.*?)\s*-->$")
TIMEOUT_S = 120

# Runs the python blocks of one document in one namespace; each reports as it ends, so a
# failure names its block.
PY_RUNNER = r"""
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__doc__"}
for line, code in blocks:
    try:
        exec(compile(code, f"{sys.argv[2]}:{line}", "exec"), ns)
    except BaseException:
        print(f"FAIL: {sys.argv[2]}:{line}: the python block raised", flush=True)
        traceback.print_exc()
        sys.exit(1)
    print(f"ok: {sys.argv[2]}:{line}", flush=True)
"""


def blocks_of(path):
    """(language, first line of code, code, skip reason or None) for every fenced block."""
    out, lines = [], open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.match(prev.strip())
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{i + 1}: a fence that never closes")
        out.append((m.group(1), i + 2, "\n".join(lines[i + 1:j]) + "\n",
                    skip.group(1) if skip else None))
        i = j + 1
    return out


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT_S, **kw)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    build, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    docs = [os.path.join(src, d) if not os.path.isabs(d) else d for d in sys.argv[3:]]
    tmp = tempfile.mkdtemp(prefix="gllm-doc-")
    sock = os.path.join(tmp, "gllmd.sock")
    log = open(os.path.join(tmp, "gllmd.log"), "w")
    daemon = subprocess.Popen([os.path.join(build, "gllmd"), "--socket", sock, "--backend",
                               "cpu", "--threads", "2"], stdout=log, stderr=log)
    env = dict(os.environ, GLLM_SOCKET=sock, HOME=os.path.join(tmp, "home"),
               GLLM_LIBRARY=os.path.join(build, "libgllm-client.so"),
               PYTHONPATH=os.path.join(src, "python"),
               # Debian's python3 and tools first: the documents are written for them.
               PATH=os.pathsep.join([build, "/usr/bin", "/bin", os.environ.get("PATH", "")]),
               LD_LIBRARY_PATH=build, PKG_CONFIG_PATH=os.path.join(tmp, "pkgconfig"))
    os.makedirs(env["HOME"])
    # gllm.pc for the build tree, so that `$(pkg-config --cflags --libs gllm)` in a block
    # finds the headers and library it was built from.
    os.makedirs(env["PKG_CONFIG_PATH"])
    with open(os.path.join(env["PKG_CONFIG_PATH"], "gllm.pc"), "w") as pc:
        pc.write(f"Name: gllm\nDescription: build tree\nVersion: 0\n"
                 f"Cflags: -I{src}/include\nLibs: -L{build} -lgllm-client\n")
    # What the blocks name relative to the top of the tree: build/ (the build directory)
    # and python/ (copied, since installing it writes into it).
    os.symlink(build, os.path.join(tmp, "build"))
    shutil.copytree(os.path.join(src, "python"), os.path.join(tmp, "python"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    failed = ran = skipped = 0
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        for doc in docs:
            name = os.path.relpath(doc, src)
            py = []
            for lang, line, code, skip in blocks_of(doc):
                where = f"{name}:{line}"
                if skip:
                    print(f"skipped: {where} ({lang or 'text'}): {skip}")
                    skipped += 1
                    continue
                if lang in ("", "text", "console"):
                    continue
                if lang == "python":
                    py.append((line, code))
                    continue
                ran += 1
                if lang == "c":
                    d = tempfile.mkdtemp(dir=tmp)
                    with open(os.path.join(d, "block.c"), "w") as f:
                        f.write(code)
                    r = run(["cc", "-std=c11", "-Wall", "-Werror", "-I", os.path.join(src, "include"),
                             "-o", os.path.join(d, "block"), os.path.join(d, "block.c"),
                             "-L", build, "-lgllm-client"], env=env)
                    if r.returncode == 0:
                        r = run([os.path.join(d, "block")], env=env, cwd=d)
                elif lang in ("sh", "bash"):
                    r = run(["bash", "-e", "-o", "pipefail", "-c", code], env=env, cwd=tmp)
                else:
                    print(f"FAIL: {where}: no way to run a '{lang}' block (mark it skip, "
                          "with the reason)")
                    failed += 1
                    continue
                if r.returncode != 0:
                    print(f"FAIL: {where} ({lang}) exited {r.returncode}:\n{r.stdout}")
                    failed += 1
                else:
                    print(f"ok: {where} ({lang})")
            if py:
                ran += len(py)
                with open(os.path.join(tmp, "blocks.json"), "w") as f:
                    json.dump(py, f)
                r = run([sys.executable, "-c", PY_RUNNER, os.path.join(tmp, "blocks.json"), name],
                        env=env, cwd=tmp)
                print(r.stdout, end="")
                if r.returncode != 0:
                    failed += 1
                    oks = r.stdout.count("ok: ")
                    ran -= len(py) - oks - 1   # those after the failing one did not run
        if daemon.poll() is not None:
            print(f"FAIL: gllmd exited {daemon.returncode} during the blocks")
            failed += 1
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{ran} blocks run, {skipped} skipped (each with its reason), {failed} failed")
    if ran == 0:
        print("FAIL: no block ran")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
