#!/usr/bin/env python3
"""A large arena registers without costing its device a reset, and jobs run after it.

Mapping an arena in a device process pins it, at about 0.45 s a GiB; a 24 GiB arena once
passed the 10 s control bound, and gllmd reset the device under every client. Checks that
registering --gib GiB leaves each device's reset count and process as they were, that a
small job runs afterwards, and that the arena goes back. Exit status 0 when all hold.

  tests/gpu/big_arena.py --socket S [--gib 24]
"""
import argparse
import sys
import time

import numpy as np

from gllm_raw import Arena, Client


def devices(client):
    return [(d.get("resets"), d.get("process_pid")) for d in client.call("status", {})["devices"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--gib", type=float, default=24)
    args = ap.parse_args()
    c = Client(args.socket)
    before = devices(c)
    t0 = time.perf_counter()
    big = Arena(c, int(args.gib * (1 << 30)))
    took = time.perf_counter() - t0
    shape = (1, 1, 128, 64)
    n = int(np.prod(shape)) * 2
    small = Arena(c, 4 * n + 4096)
    for i in range(3):
        small.view(i * n, "f16", shape)[...] = np.random.default_rng(i).standard_normal(shape)
    small.view(3 * n, "f16", shape)[...] = np.nan
    params = {name: Client.tensor(small, i * n, "f16", shape) for i, name in enumerate("qkv")}
    params["out"] = Client.tensor(small, 3 * n, "f16", shape)
    c.call("attention", params)
    finite = bool(np.isfinite(small.view(3 * n, "f16", shape)).all())
    big.release()
    after = devices(c)
    ok = after == before and finite
    print(f"{'ok  ' if ok else 'FAIL'} a {args.gib:g} GiB arena registered in {took:.1f} s; "
          f"devices (resets, process) before {before}, after {after}; a job after it "
          f"{'wrote' if finite else 'did not write'} its output")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
