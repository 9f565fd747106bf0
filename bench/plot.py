#!/usr/bin/env python3
"""Plots of gllm-bench-run/1 results (bench/SCHEMA.md), as SVG and PNG.

Usage: plot.py --out DIR [--baseline BASE.json ...] [--threshold 0.03] RUN.json ...
Several files on a side are merged (rounds appended). Writes into DIR:
  throughput.svg/.png           TFLOP/s and GB/s per shape of the run: gllm and its peers,
                                bars at the median of the rounds, whiskers at min and max
  baseline-throughput.svg/.png  the same for the baseline (with --baseline)
  vs-baseline.svg/.png          each gated figure's current median over the baseline's, the
                                rounds' ranges as whiskers and a band, the threshold as lines
"""
import argparse
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchrun  # noqa: E402
import compare  # noqa: E402

# Who a figure belongs to, by its key, and the colour it gets in every plot.
SERIES = [("gllm", ("gllm_", "kernel_tflops", "kv_gbps"), "#1f6fb4"),
          ("FA2 per call", ("fa2_per_call_",), "#f2a541"), ("FA2 graph", ("fa2_graph_",), "#c77d0a"),
          ("cuDNN per call", ("cudnn_per_call_",), "#7fbf7b"), ("cuDNN graph", ("cudnn_graph_",), "#2e8b3a")]
UNITS = {"tflops": "TFLOP/s", "gbps": "GB/s"}


def series_of(fig):
    for name, prefixes, colour in SERIES:
        if fig.startswith(prefixes):
            return name, colour
    return None, None


def save(fig, out, stem):
    for ext in ("svg", "png"):
        fig.savefig(os.path.join(out, f"{stem}.{ext}"), dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [f"{stem}.svg", f"{stem}.png"]


def throughput(run, out, stem, title):
    """One panel per (suite, unit) with throughput figures; grouped bars per shape."""
    panels = {}
    for c in run["cases"]:
        for f, vals in c["figures"].items():
            u = benchrun.unit(f)
            s, _ = series_of(f)
            if u in UNITS and s and not f.startswith("gllm_arena") and "pinned" not in f:
                panels.setdefault((c["suite"], u), {}).setdefault(c["name"], {})[s] = vals
    if not panels:
        return []
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 4 * len(panels)), squeeze=False,
                             layout="constrained")
    for ax, ((suite, u), shapes) in zip(axes[:, 0], sorted(panels.items())):
        names = list(shapes)
        present = [s for s, _, _ in SERIES if any(s in shapes[n] for n in names)]
        width = 0.8 / max(len(present), 1)
        x = np.arange(len(names))
        for i, (s, _, colour) in enumerate([t for t in SERIES if t[0] in present]):
            med, lo, hi = [], [], []
            for n in names:
                v = np.asarray(shapes[n].get(s, [np.nan]), dtype=float)
                m = float(np.median(v))
                med.append(m)
                lo.append(m - float(v.min()))
                hi.append(float(v.max()) - m)
            ax.bar(x + (i - (len(present) - 1) / 2) * width, med, width, yerr=[lo, hi],
                   label=s, color=colour, capsize=2)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=12, ha="right", fontsize=8)
        ax.set_ylabel(UNITS[u])
        ax.set_title(f"{suite} ({UNITS[u]}; median of the rounds, whiskers min..max)", fontsize=10)
        ax.legend(fontsize=8, ncol=len(present))
        ax.grid(axis="y", alpha=0.3)
    m = run["meta"]
    fig.suptitle(f"{title}: {m['device']}, gllmd {m['gllmd_version']}, commit {m['commit']}, "
                 f"{m['date']}" + (f" [test slowdown {m['test_slowdown']}]" if m.get("test_slowdown") else ""),
                 fontsize=10)
    return save(fig, out, stem)


def vs_baseline(base, cur, threshold, out):
    rows, _, _ = compare.compare(base, cur, threshold, gate_all=False)
    rows = [r for r in rows if r["gated"]]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.32 * len(rows)))
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows):
        b, c = r["baseline"], r["current"]
        sign = 1 if r["better"] == "higher" else -1
        # Plotted as speed relative to the baseline: above 1 is faster, whichever the unit.
        rel = (lambda v: v / b["median"]) if sign > 0 else (lambda v: b["median"] / v)
        blo, bhi = sorted((rel(b["min"]), rel(b["max"])))
        clo, chi = sorted((rel(c["min"]), rel(c["max"])))
        ax.fill_betweenx([yi - 0.35, yi + 0.35], blo, bhi, color="0.8", lw=0)
        colour = {"REGRESSION": "#c0392b", "faster": "#2e8b3a"}.get(r["verdict"], "#1f6fb4")
        m = rel(c["median"])
        ax.errorbar([m], [yi], xerr=[[m - clo], [chi - m]], fmt="o", color=colour, capsize=3)
    for t in (1 - threshold, 1 + threshold):
        ax.axvline(t, color="0.4", ls="--", lw=0.8)
    ax.axvline(1, color="0.2", lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r['case']} {r['figure']}" for r in rows], fontsize=7)
    ax.set_xlabel("speed relative to the baseline median (grey: baseline rounds; dashed: threshold)")
    bm, cm = base["meta"], cur["meta"]
    ax.set_title(f"current ({cm['commit']}, {cm['date']}) vs baseline ({bm['commit']}, {bm['date']}) "
                 f"on {cm['device']}" + (" [test slowdown]" if cm.get("test_slowdown") else ""), fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, out, "vs-baseline")


def main(argv):
    ap = argparse.ArgumentParser(description="plots of benchmark runs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--baseline", nargs="+", default=[])
    ap.add_argument("--threshold", type=float, default=0.03)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args(argv)
    try:
        cur = benchrun.merge([benchrun.load(p) for p in args.runs])
        base = benchrun.merge([benchrun.load(p) for p in args.baseline]) if args.baseline else None
    except benchrun.BadRun as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    written = throughput(cur, args.out, "throughput", "current")
    if base:
        written += throughput(base, args.out, "baseline-throughput", "baseline")
        written += vs_baseline(base, cur, args.threshold, args.out)
    for w in written:
        print(os.path.join(args.out, w))
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
