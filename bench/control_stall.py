#!/usr/bin/env python3
"""How long one client's arena registration holds up another client's jobs.

Registering an arena maps and pins it in each device process, in time that grows with its
bytes. Client B sends small prefill jobs one after another, and client C makes and frees a
1 MiB device tensor over and over, while client A registers an arena of each given size and
releases it; the figures are B's slowest job and C's slowest device tensor meanwhile against
B's jobs alone, and how long A's registration and release took (docs/hardening.md). B and C go
on for --tail-ms after the release's answer, since the arena's teardown (unpinning, unmapping)
runs after it; B's and C's slowest are also given for the registration and for the release and
tail apart. A job is B1 H1 S128 D64 f16 from an arena of B's own.

  bench/control_stall.py --socket S [--sizes-gib 1,4,16] [--tail-ms 1000] [--json OUT]
"""
import argparse
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from gllm_raw import Arena, Client, small_prefill  # noqa: E402


def timed(client, params):
    t0 = time.perf_counter()
    client.call("attention", params)
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--sizes-gib", default="1,4,16")
    ap.add_argument("--alone", type=int, default=200, help="B's jobs timed alone")
    ap.add_argument("--tail-ms", type=float, default=1000,
                    help="how long B and C go on after the release's answer")
    ap.add_argument("--json")
    args = ap.parse_args()
    b, c = Client(args.socket), Client(args.socket)
    _, params, _ = small_prefill(b)
    for _ in range(20):
        timed(b, params)
    alone = [timed(b, params) for _ in range(args.alone)]
    out = {"job": "attention B1 H1 S128 D64 f16, arena inputs",
           "alone_ms": {"p50": float(np.median(alone)), "max": max(alone)}, "sizes": {}}
    print(f"B alone: p50 {out['alone_ms']['p50']:.3f} ms, max {out['alone_ms']['max']:.3f} ms")
    for gib in (float(x) for x in args.sizes_gib.split(",")):
        a = Client(args.socket)
        done, span = threading.Event(), {}

        def register():
            t0 = time.perf_counter()
            arena = Arena(a, int(gib * (1 << 30)))
            span["register_ms"] = (time.perf_counter() - t0) * 1e3
            span["release_start"] = t0 = time.perf_counter()
            arena.release()
            span["release_ms"] = (time.perf_counter() - t0) * 1e3
            time.sleep(args.tail_ms / 1e3)
            done.set()

        during, made = [], []

        def dtensors():
            while not done.is_set():
                t0 = time.perf_counter()
                dt = c.call("dtensor_create", {"bytes": 1 << 20})["dtensor"]
                made.append((t0, (time.perf_counter() - t0) * 1e3))
                c.call("dtensor_free", {"dtensor": dt})

        threads = [threading.Thread(target=register), threading.Thread(target=dtensors)]
        for th in threads:
            th.start()
        starts = []
        while not done.is_set():
            starts.append(time.perf_counter())
            during.append(timed(b, params))
        for th in threads:
            th.join()
        # A job still running when the registration ended counts in both phases.
        reg_end = span["release_start"]

        def phases(timed_calls):
            return ([ms for t, ms in timed_calls if t < reg_end],
                    [ms for t, ms in timed_calls if t + ms / 1e3 >= reg_end])
        in_reg, after = phases(list(zip(starts, during)))
        c_reg, c_after = phases(made)
        row = {"register_ms": span["register_ms"], "release_ms": span["release_ms"],
               "tail_ms": args.tail_ms, "b_jobs": len(during),
               "b_max_ms": max(during), "b_p50_ms": float(np.median(during)),
               "b_max_register_ms": max(in_reg, default=None),
               "b_max_release_ms": max(after, default=None),
               "c_dtensors": len(made), "c_max_ms": max((ms for _, ms in made), default=None),
               "c_max_register_ms": max(c_reg, default=None),
               "c_max_release_ms": max(c_after, default=None)}
        out["sizes"][f"{gib:g} GiB"] = row
        print(f"A registers {gib:g} GiB in {row['register_ms']:.1f} ms, releases it in "
              f"{row['release_ms']:.1f} ms; B meanwhile: "
              f"{row['b_jobs']} jobs, slowest {row['b_max_ms']:.1f} ms (registering "
              f"{row['b_max_register_ms'] or 0:.1f}, releasing and after {row['b_max_release_ms'] or 0:.1f}), "
              f"p50 {row['b_p50_ms']:.3f} ms; "
              f"C: {row['c_dtensors']} device tensors, slowest {row['c_max_ms'] or 0:.1f} ms "
              f"(registering {row['c_max_register_ms'] or 0:.1f}, releasing and after "
              f"{row['c_max_release_ms'] or 0:.1f})")
        a.sock.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
