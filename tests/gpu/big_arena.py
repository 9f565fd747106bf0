#!/usr/bin/env python3
"""A large arena registers without costing its device a reset, and jobs run after it.

Mapping an arena in a device process pins it, at about 0.45 s a GiB; a 24 GiB arena once
passed the 10 s control bound, and gllmd reset the device under every client. Checks that
registering --gib GiB leaves each device's reset count and process as they were, that a
small job runs afterwards, that 600 MiB go from the arena to a device tensor and back
unchanged (the copies span several of the pieces the CUDA backend pins an arena in, which the
driver refuses in one copy), and that the arena goes back. Exit status 0 when all hold.

  tests/gpu/big_arena.py --socket S [--gib 24]
"""
import argparse
import sys
import time

import numpy as np

from gllm_raw import Arena, Client, small_prefill


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
    _, params, out = small_prefill(c)
    c.call("attention", params)
    finite = bool(np.isfinite(out).all())
    n, src, dst = 600 << 20, (1 << 30) + 4097, big.size - (600 << 20) - 123
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    np.frombuffer(big.map, np.uint8, n, src)[:] = data
    dt = c.call("dtensor_create", {"bytes": n})["dtensor"]
    for to_device, off in ((True, src), (False, dst)):
        c.call("dtensor_copy", {"dtensor": dt, "arena": big.id, "arena_offset": off, "bytes": n,
                                "to_device": to_device})
    same = bool(np.array_equal(np.frombuffer(big.map, np.uint8, n, dst), data))
    c.call("dtensor_free", {"dtensor": dt})
    big.release()
    after = devices(c)
    ok = after == before and finite and same
    print(f"{'ok  ' if ok else 'FAIL'} a {args.gib:g} GiB arena registered in {took:.1f} s; "
          f"devices (resets, process) before {before}, after {after}; a job after it "
          f"{'wrote' if finite else 'did not write'} its output; 600 MiB to a device tensor and "
          f"back {'unchanged' if same else 'CHANGED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
