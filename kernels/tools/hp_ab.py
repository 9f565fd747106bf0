#!/usr/bin/env python3
"""A/B runs of the prefill harness (hp_trace.cu builds): each variant's O checked against the
first variant's, then every shape timed with the variants alternated, round after round, so
that the GPU's clock and temperature drift over all of them alike. Prints each variant's median
time and its change against the first; --json writes the figures (gllm-hp-ab/1).

  hp_ab.py --variant base=.hp/hp_base --variant k3=.hp/hp_k3 \\
           --variant pnone=.hp/hp_base,HP_L2_PROMO=none \\
           --shape "128 32 16 512 1" --shape "128 8 16 2048 0" --rounds 3 --json ab.json

A variant is NAME=PATH[,VAR=VALUE...]: a harness binary and environment variables of its own
(the same binary may appear twice with different ones); kernels/tools/hp_build.sh builds one
from the tree with a patch applied. A shape is "D B H S causal". Every run
gets HP_LAYOUT=bhsd (PyTorch's layout, as gpu_compare.py times) unless --layout bshd.

The check runs each variant once with HP_OUT and compares O with the first variant's: bit for
bit by default (a change that moves loads must not change a bit), or, with --tol X, to within X
of the first's largest magnitude (a change that reorders arithmetic). With --repeat N each
variant's O is taken N times, and one whose runs differ among themselves is named NOT
REPEATABLE (the split prefill's merge, whose result depended on which block finished last).
A variant that differs, is not repeatable, or whose O is not finite, makes the exit status 1;
its times are still taken and printed.

Each harness run gets --timeout seconds (default 60): a build that deadlocks (v48's first did)
is killed there and named, and the status is 2, instead of the call spending its device time
waiting.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import benchrun  # noqa: E402  (the run's commit and GPU, as every result file names them)

TIME = re.compile(r"([0-9]+(?:\.[0-9]+)?) us")


def parse_variant(text):
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"variant {text!r}: NAME=PATH[,VAR=VALUE...]")
    path, *pairs = rest.split(",")
    env = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise argparse.ArgumentTypeError(f"variant {text!r}: {pair!r} is not VAR=VALUE")
        env[k] = v
    return {"name": name, "path": path, "env": env}


def parse_shape(text):
    parts = text.split()
    if len(parts) != 5 or not all(p.isdigit() for p in parts) or parts[4] not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"shape {text!r}: \"D B H S causal\", causal 0 or 1")
    return parts


def shape_name(shape):
    d, b, h, s, causal = shape
    return f"D{d} B{b} H{h} S{s}" + (" causal" if causal == "1" else "")


class HarnessError(RuntimeError):
    pass


def run(variant, shape, layout, scratch, timeout, extra=None):
    """One harness run, killed after timeout seconds; its time per launch (us)."""
    env = dict(os.environ)
    if layout == "bhsd":
        env["HP_LAYOUT"] = "bhsd"
    else:
        env.pop("HP_LAYOUT", None)
    env.update(variant["env"])
    env.update(extra or {})
    cmd = [variant["path"], *shape, os.path.join(scratch, "trace.bin")]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise HarnessError(f"{variant['name']} {shape_name(shape)}: no result in {timeout:g} s "
                           "(hung?), killed") from e
    except OSError as e:
        raise HarnessError(f"{variant['name']} {shape_name(shape)}: {e}") from e
    m = TIME.search(r.stdout)
    if r.returncode != 0 or not m:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise HarnessError(f"{variant['name']} {shape_name(shape)}: exit {r.returncode}: {tail[0]}")
    return float(m.group(1))


def check(variants, shape, layout, scratch, tol, timeout, repeat=1):
    """Each variant's O against the first's: 'identical', 'within tol (x)' or why not. With
    repeat > 1 each variant's O is taken that many times, and a variant whose runs differ
    among themselves is named too ('NOT REPEATABLE': the order blocks finish in shows)."""
    outs, differ_runs = [], {}
    for i, v in enumerate(variants):
        path = os.path.join(scratch, f"o{i}.bin")
        seen = set()
        for _ in range(repeat):
            run(v, shape, layout, scratch, timeout, {"HP_OUT": path, "HP_ITERS": "2"})
            o = np.fromfile(path, np.float16)
            if not seen:
                outs.append(o)
            seen.add(o.tobytes())
        if len(seen) > 1:
            differ_runs[v["name"]] = len(seen)
    ref = outs[0]
    scale = float(np.max(np.abs(ref.astype(np.float64)))) if ref.size else 0.0
    verdicts = {}
    for v, o in zip(variants[1:], outs[1:]):
        if o.shape != ref.shape:
            verdicts[v["name"]] = f"DIFFER: {o.size} values against {ref.size}"
        elif not np.isfinite(o).all():
            verdicts[v["name"]] = "DIFFER: not finite"
        elif np.array_equal(o.view(np.uint16), ref.view(np.uint16)):
            verdicts[v["name"]] = "identical"
        else:
            err = float(np.max(np.abs(o.astype(np.float64) - ref))) / (scale or 1.0)
            ok = tol > 0 and err <= tol
            verdicts[v["name"]] = f"{'within tol' if ok else 'DIFFER'} ({err:.2e} of max |O|)"
    if not np.isfinite(ref).all():
        verdicts[variants[0]["name"]] = "DIFFER: the reference's O is not finite"
    for name, n in differ_runs.items():
        said = verdicts.get(name)
        verdicts[name] = (f"NOT REPEATABLE: {n} different O in {repeat} runs" +
                          (f"; first run {said}" if said else ""))
    return verdicts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", type=parse_variant, action="append", required=True,
                    help="NAME=PATH[,VAR=VALUE...]; the first is the one the others are held to")
    ap.add_argument("--shape", type=parse_shape, action="append", required=True,
                    help='"D B H S causal"')
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layout", choices=("bhsd", "bshd"), default="bhsd")
    ap.add_argument("--tol", type=float, default=0.0,
                    help="accept O within this fraction of the first's largest |O| (0: bit for bit)")
    ap.add_argument("--no-check", action="store_true", help="time only")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="take each variant's O N times and name one whose runs differ")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds a harness run may take before it is killed (default 60)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    names = [v["name"] for v in args.variant]
    if len(set(names)) != len(names):
        ap.error("variant names must differ")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not args.timeout > 0:
        ap.error("--timeout must be more than 0")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    doc = {"schema": "gllm-hp-ab/1",
           "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
           "commit": benchrun.commit(), **benchrun.nvidia_smi(),
           "layout": args.layout, "rounds": args.rounds, "repeat": args.repeat,
           "variants": {v["name"]: {"path": v["path"], "env": v["env"]} for v in args.variant},
           "shapes": {}}
    differ = False
    try:
        with tempfile.TemporaryDirectory(prefix="hp-ab-") as scratch:
            for shape in args.shape:
                entry = doc["shapes"].setdefault(shape_name(shape), {"us": {n: [] for n in names}})
                if not args.no_check:
                    entry["check"] = check(args.variant, shape, args.layout, scratch, args.tol,
                                           args.timeout, args.repeat)
                    for name, verdict in entry["check"].items():
                        print(f"O {shape_name(shape)} {name}: {verdict}", flush=True)
                        differ |= verdict.startswith(("DIFFER", "NOT REPEATABLE"))
            for r in range(args.rounds):
                for shape in args.shape:
                    entry = doc["shapes"][shape_name(shape)]
                    for v in args.variant:
                        us = run(v, shape, args.layout, scratch, args.timeout)
                        entry["us"][v["name"]].append(us)
                        print(f"r{r + 1} {v['name']} {shape_name(shape)}: {us:.1f} us", flush=True)
    except HarnessError as e:
        print(f"hp_ab: {e}", file=sys.stderr)
        return 2

    print(f"\n{'shape':28s}" + "".join(f"{n:>18s}" for n in names))
    for sname, entry in doc["shapes"].items():
        med = {n: statistics.median(entry["us"][n]) for n in names}
        entry["median_us"] = med
        entry["change"] = {n: f"{(med[n] / med[names[0]] - 1) * 100:+.1f}%" for n in names[1:]}
        cells = [f"{med[names[0]]:.1f} us"] + [f"{med[n]:.1f} {entry['change'][n]}" for n in names[1:]]
        print(f"{sname:28s}" + "".join(f"{c:>18s}" for c in cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
