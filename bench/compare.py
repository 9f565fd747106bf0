#!/usr/bin/env python3
"""The benchmark regression gate: a baseline run against a current one (gllm-bench-run/1,
bench/SCHEMA.md), several rounds per side.

Usage: compare.py [--threshold 0.03] [--min-us 1] [--json] [--require-all] [--gate-all]
                  BASELINE.json [...] -- CURRENT.json [...]
       compare.py BASELINE.json CURRENT.json [CURRENT.json ...]
Several files on one side are merged (rounds appended). Exit status: 0 no regression,
1 a regression (or, with --require-all, a gated case missing from the current run),
2 bad input (unreadable or malformed file, no case in common).

When a figure has regressed. Each side's interval is the range of its rounds, minimum to
maximum. A gated figure is a regression only when both hold:
  1. the intervals separate: for a figure where higher is better (TFLOP/s, GB/s), the
     current maximum is below the baseline minimum; where lower is better (us, ms), the
     current minimum is above the baseline maximum; and
  2. the medians differ by more than the threshold (3% by default) of the baseline median;
  3. and the change is more than --min-us (1 microsecond by default) of the case's time: for
     a time figure its own change; for a throughput figure the change it makes to the
     case's kernel time when the case records one (gllm_kernel_us, kernel_us). Kernels of
     10-15 us differ by 0.7-0.9 us (5-7%) between H100s of one pool with the same binary
     (docs/performance.md, "Benchmark CI"): a percentage alone fails unchanged builds there.
Why the range and not a bootstrap or a t-interval: a GPU benchmark here has 1 to 5 rounds a
side, each round already a median over many timed calls. A bootstrap over three values
only resamples those three, and its percentile interval is narrower than the range it
came from; a t-interval assumes a spread that three values cannot estimate. The range is
what was actually seen: if every current round is worse than every baseline round, the
difference is not noise between rounds, and the threshold then keeps a real but tiny
shift (a different machine's clocks, say) from failing the build. With one round a side
the interval is a point and only the threshold decides: say so with more rounds.

Which figures are gated: those each case lists in "gate" (gllm's kernel throughput and
time, chosen by the tool that wrote it), or with --gate-all every gllm figure with a
unit. Peers' figures (fa2_, cudnn_, torch_) and unitless ratios are shown, never gated:
a peer's speed is not gllm's to regress.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchrun  # noqa: E402


def summary(vals):
    a = np.asarray(vals, dtype=np.float64)
    return {"n": int(a.size), "min": float(a.min()), "median": float(np.median(a)),
            "max": float(a.max())}


# The figures that hold a case's kernel time, in the order they are looked for.
KERNEL_TIME_FIGURES = ("gllm_kernel_us", "kernel_us")


def time_change_us(figure, b, c, kernel_us):
    """How much the case's time moved, in microseconds, as far as this figure says: None
    when it cannot say (a throughput figure of a case without a kernel time)."""
    unit = benchrun.unit(figure)
    if unit in ("us", "ms"):
        return abs(c["median"] - b["median"]) * (1000.0 if unit == "ms" else 1.0)
    if benchrun.direction(figure) > 0 and kernel_us and c["median"] > 0:
        return kernel_us * abs(b["median"] / c["median"] - 1.0)
    return None


def judge(figure, base, cur, threshold, gated, min_us=0.0, kernel_us=None):
    """One figure of one case: the row of the table."""
    b, c = summary(base), summary(cur)
    d = benchrun.direction(figure)
    change = (c["median"] - b["median"]) / b["median"] if b["median"] else 0.0
    if d > 0:
        worse_sep, better_sep = c["max"] < b["min"], c["min"] > b["max"]
    elif d < 0:
        worse_sep, better_sep = c["min"] > b["max"], c["max"] < b["min"]
    else:
        worse_sep = better_sep = False
    worse = change * d < 0      # the median moved the wrong way
    moved_us = time_change_us(figure, b, c, kernel_us)
    past = abs(change) > threshold and (moved_us is None or moved_us > min_us)
    if d == 0:
        verdict = "info"
    elif worse and worse_sep and past:
        verdict = "REGRESSION" if gated else "slower"
    elif not worse and better_sep and past:
        verdict = "faster"
    elif past:
        verdict = "noise"       # moved past the threshold, but the intervals overlap
    else:
        verdict = "ok"
    return {"figure": figure, "unit": benchrun.unit(figure),
            "better": {1: "higher", -1: "lower", 0: None}[d], "gated": gated,
            "baseline": b, "current": c, "change": change,
            "separated": bool(worse_sep or better_sep), "moved_us": moved_us,
            "verdict": verdict}


def compare(base, cur, threshold, gate_all, min_us=1.0):
    bcases = {benchrun.case_key(c): c for c in base["cases"]}
    ccases = {benchrun.case_key(c): c for c in cur["cases"]}
    rows, missing = [], []
    for key, bc in bcases.items():
        cc = ccases.get(key)
        if cc is None:
            missing.append({"case": key, "gated": bool(bc.get("gate"))})
            continue
        gate = set(bc.get("gate", [])) | set(cc.get("gate", []))
        kernel_us = next((float(np.median(bc["figures"][f])) for f in KERNEL_TIME_FIGURES
                          if bc["figures"].get(f)), None)
        for fig, bvals in bc["figures"].items():
            if fig not in cc["figures"]:
                if fig in gate:
                    missing.append({"case": f"{key} / {fig}", "gated": True})
                continue
            gated = fig in gate or (gate_all and benchrun.direction(fig) != 0
                                    and not benchrun.is_peer(fig))
            row = judge(fig, bvals, cc["figures"][fig], threshold, gated, min_us, kernel_us)
            row["case"] = key
            rows.append(row)
    new = [k for k in ccases if k not in bcases]
    return rows, missing, new


def fmt(v):
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"


def print_table(rows, missing, new, base, cur, threshold):
    bm, cm = base["meta"], cur["meta"]
    print(f"baseline: {bm['device']}, gllmd {bm['gllmd_version']}, commit {bm['commit']}, {bm['date']}")
    print(f"current:  {cm['device']}, gllmd {cm['gllmd_version']}, commit {cm['commit']}, {cm['date']}"
          + (f"  [TEST SLOWDOWN {cm['test_slowdown']}]" if cm.get("test_slowdown") else ""))
    if bm["device"] != cm["device"]:
        print(f"warning: the devices differ ({bm['device']!r} vs {cm['device']!r})")
    print(f"threshold {threshold:.1%}; interval = min..max of the rounds; * = gated\n")
    w = max([len(r["case"]) for r in rows] + [20])
    w = min(w, 64)
    print(f"{'case':{w}} {'figure':22} {'baseline (n) med [min..max]':>32} "
          f"{'current (n) med [min..max]':>32} {'change':>7}  verdict")
    for r in rows:
        b, c = r["baseline"], r["current"]
        bs = f"({b['n']}) {fmt(b['median'])} [{fmt(b['min'])}..{fmt(b['max'])}]"
        cs = f"({c['n']}) {fmt(c['median'])} [{fmt(c['min'])}..{fmt(c['max'])}]"
        print(f"{r['case'][:w]:{w}} {r['figure'] + ('*' if r['gated'] else ''):22} {bs:>32} "
              f"{cs:>32} {r['change']:+7.1%}  {r['verdict']}")
    for m in missing:
        print(f"missing from the current run: {m['case']}{' (gated)' if m['gated'] else ''}")
    for k in new:
        print(f"not in the baseline: {k}")
    reg = [r for r in rows if r["verdict"] == "REGRESSION"]
    print(f"\n{len(reg)} regression{'s' if len(reg) != 1 else ''} in {len(rows)} figures "
          f"({sum(r['gated'] for r in rows)} gated)")
    for r in reg:
        print(f"REGRESSION {r['case']} {r['figure']}: {r['change']:+.1%}")


def main(argv):
    ap = argparse.ArgumentParser(description="benchmark regression gate (see the module docstring)")
    ap.add_argument("--threshold", type=float, default=0.03,
                    help="relative change of the median that counts (default 0.03 = 3%%)")
    ap.add_argument("--min-us", type=float, default=1.0,
                    help="smallest change of a case's time, in microseconds, that counts (default 1)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--require-all", action="store_true",
                    help="a gated case or figure of the baseline missing from the current run fails")
    ap.add_argument("--gate-all", action="store_true",
                    help="gate every gllm figure with a unit, not only each case's gate list")
    ap.add_argument("--out", help="also write the JSON comparison to this file")
    ap.add_argument("files", nargs="+", metavar="FILE")
    # argparse drops a "--" it sees, so the sides are split here: before it the options and
    # the baseline's files, after it the current run's.
    current = None
    if "--" in argv:
        i = argv.index("--")
        argv, current = argv[:i], argv[i + 1:]
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if not 0 <= args.threshold < 1:
        print("compare: --threshold wants 0 to 1 (0.03 is 3%)", file=sys.stderr)
        return 2
    bpaths, cpaths = (args.files, current) if current is not None else (args.files[:1], args.files[1:])
    if not bpaths or not cpaths:
        print("compare: want a baseline and a current run", file=sys.stderr)
        return 2
    try:
        base = benchrun.merge([benchrun.load(p) for p in bpaths])
        cur = benchrun.merge([benchrun.load(p) for p in cpaths])
    except benchrun.BadRun as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2
    if args.min_us < 0:
        print("compare: --min-us wants a time of 0 or more", file=sys.stderr)
        return 2
    rows, missing, new = compare(base, cur, args.threshold, args.gate_all, args.min_us)
    if not rows:
        print("compare: the baseline and the current run have no case in common", file=sys.stderr)
        return 2
    regressions = sum(r["verdict"] == "REGRESSION" for r in rows)
    missing_gated = [m for m in missing if m["gated"]]
    failed = regressions > 0 or (args.require_all and bool(missing_gated))
    result = {"schema": "gllm-bench-compare/1", "threshold": args.threshold, "min_us": args.min_us,
              "interval": "min..max of the rounds", "baseline": base["meta"],
              "current": cur["meta"], "regressions": regressions, "missing": missing,
              "not_in_baseline": new, "failed": failed, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print_table(rows, missing, new, base, cur, args.threshold)
        if args.require_all and missing_gated:
            print(f"FAIL: {len(missing_gated)} gated case(s) of the baseline missing (--require-all)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
