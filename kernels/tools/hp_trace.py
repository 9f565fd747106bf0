#!/usr/bin/env python3
"""Reads hp_trace's timeline (kernels/tools/hp_trace.cu) and prints where a tile's time goes."""
import struct
import sys
from collections import defaultdict

import numpy as np

NAMES = {1: "tile", 2: "walk", 10: "K in", 11: "turn", 12: "issued", 13: "S in", 14: "softmax",
         15: "PV in", 16: "V in", 17: "last turn", 18: "last PV in", 20: "epilogue",
         21: "stored", 22: "O free", 23: "O written", 24: "O fenced", 25: "inv", 30: "K slot?", 31: "K slot", 32: "V sent", 33: "Q slot"}


def load(path):
    data = open(path, "rb").read()
    D, B, H, S, causal, grid, nb, na = struct.unpack_from("8i", data, 0)
    us, tflops = struct.unpack_from("2f", data, 32)
    off = 40
    cnt = np.frombuffer(data, np.uint32, nb * na, off).reshape(nb, na)
    off += 4 * nb * na
    ev = {}
    for b in range(nb):
        raws = []
        for a in range(na):
            n = int(min(cnt[b, a], 8192))
            raws.append(np.frombuffer(data, np.uint64, n, off))
            off += 8 * n
        # One SM clock for the block's agents: times from its earliest event (mod 2^32).
        firsts = [int(r[0]) & 0xffffffff for r in raws if len(r)]
        base = min(firsts, key=lambda c: (c - firsts[0]) % (1 << 32) - (1 << 31)) if firsts else 0
        for a, raw in enumerate(raws):
            clk = ((raw & 0xffffffff).astype(np.int64) - base) % (1 << 32)
            ev[b, a] = list(zip(((raw >> 32) & 0xff).astype(int), (raw >> 40).astype(int), clk))
    span = np.frombuffer(data, np.uint64, 3 * min(grid, 1024), off).reshape(-1, 3)
    return dict(D=D, B=B, H=H, S=S, causal=causal, grid=grid, us=us, tflops=tflops), ev, span


def tiles(events):
    """One consumer's events, cut at each tile start (code 1)."""
    out, cur = [], None
    for code, aux, t in events:
        if code == 1:
            if cur:
                out.append(cur)
            cur = [(code, aux, t)]
        elif cur is not None:
            cur.append((code, aux, t))
    if cur:
        out.append(cur)
    return out


def main():
    meta, ev, span = load(sys.argv[1])
    print("D{D} B{B} H{H} S{S} causal {causal}: grid {grid}, {us:.1f} us, {tflops:.1f} TFLOP/s"
          .format(**meta))
    start = span[:, 0].astype(np.int64)
    end = span[:, 1].astype(np.int64)
    t0 = start.min()
    print("blocks: start spread %.2f us, end spread %.2f us (first end %.2f, last %.2f)" %
          ((start.max() - t0) / 1e3, (end.max() - end.min()) / 1e3, (end.min() - t0) / 1e3,
           (end.max() - t0) / 1e3))
    consumers = 3 if meta["D"] == 64 else 2
    steps = defaultdict(list)       # (from, to, where) -> cycles
    periods, keyperiods, ntiles = [], [], []
    for (b, a), evs in ev.items():
        if a >= consumers or not evs:
            continue
        tl = tiles(evs)
        for i, tile in enumerate(tl):
            n = tile[0][1]
            if i + 1 < len(tl):
                periods.append((n, tl[i + 1][0][2] - tile[0][2]))
            turns = [t for c, x, t in tile if c == 11]
            keyperiods += list(np.diff(turns[1:])) if len(turns) > 2 else []
            for (c0, x0, t0_), (c1, x1, t1) in zip(tile, tile[1:]):
                where = "j0" if x0 == 0 and c0 < 20 else ("last" if c0 >= 16 else "mid")
                steps[c0, c1, where].append(t1 - t0_)
            if i + 1 < len(tl):
                steps[tile[-1][0], 1, "next"].append(tl[i + 1][0][2] - tile[-1][2])
    print("\nstep (cycles, median / mean, count):")
    for (c0, c1, where), v in sorted(steps.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        print("  %-5s %-10s -> %-10s %7.0f %7.0f %6d" % (where, NAMES.get(c0, c0), NAMES.get(c1, c1),
                                                          np.median(v), np.mean(v), len(v)))
    if keyperiods:
        kp = np.median(keyperiods)
        print("\nkey-tile period in a tile's middle (turn to turn): median %.0f, mean %.0f cycles"
              % (kp, np.mean(keyperiods)))
        byn = defaultdict(list)
        for n, p in periods:
            byn[n].append(p)
        for n, v in sorted(byn.items()):
            print("tile of %d key tiles: period median %.0f = %.2f key tiles (overhead %.2f), %d tiles"
                  % (n, np.median(v), np.median(v) / kp, np.median(v) / kp - n, len(v)))
    prod = [evs for (b, a), evs in ev.items() if a == consumers and evs]
    if prod:
        waits = defaultdict(list)
        for evs in prod:
            for (c0, x0, t0_), (c1, x1, t1) in zip(evs, evs[1:]):
                waits[c0, c1, x0 == 0].append(t1 - t0_)
        print("\nproducer:")
        for (c0, c1, first), v in sorted(waits.items()):
            print("  %-5s %-10s -> %-10s %7.0f %7.0f %6d" % ("j0" if first else "j", NAMES.get(c0, c0),
                                                              NAMES.get(c1, c1), np.median(v),
                                                              np.mean(v), len(v)))


def raw(path, block, t_from, t_to):
    """Block's events of every agent between two times, in time order."""
    meta, ev, _ = load(path)
    rows = sorted((t, a, c, x) for (b, a), evs in ev.items() if b == block for c, x, t in evs
                  if t_from <= t <= t_to)
    for t, a, c, x in rows:
        print("%8d  %s%-10s %d" % (t, "            " * a, NAMES.get(c, c), x))


if __name__ == "__main__":
    if len(sys.argv) == 5:
        raw(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
