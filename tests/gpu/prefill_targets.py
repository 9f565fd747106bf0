#!/usr/bin/env python3
"""Issue 19's prefill targets judged from the GPU tools' results, kernel against kernel: gllm's
runs back to back (gllmd's `repeat`) against cuDNN replayed from a CUDA graph, as
gpu_compare.py times them.

  prefill_targets.py --sweep SWEEP/gpu_compare.json --bench CHECK/gpu_compare.json \\
                     [--paged CHECK/gpu_paged.json] [--json OUT.json]

SWEEP is gpu_compare.py's output with --sweep (FlashAttention-3's 56 shapes, each checked in
float64 first); CHECK is gpu-check.sh's (the bench's four shapes, the float64 cases, and
gpu_paged.py's chunked prefill). The targets:

  - every sweep shape and every standard shape at or above 1.0x cuDNN;
  - D = 128 without a causal mask at S >= 2048 (GQA included) at or above 1.1x;
  - chunked (paged) prefill at or above 0.9x the dense kernel on the same tokens (--paged);
  - every float64 check passed: the sweep's, one for each of its shapes, and the cases'.

Prints one line a target (the lowest figure and its shape, every shape below the bar) and,
with --json, writes them (gllm-prefill-targets/1) with the run's machine, date and commit.
Exit status: 0 when every target judged is met, 1 when one is not, 2 when the results are
unreadable or incomplete (a shape of the sweep or the standard list missing).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prefill_shapes  # noqa: E402

AT_LEAST_CUDNN = 1.0
D128_LONG = 1.1
D128_LONG_FROM = 2048
PAGED_OF_DENSE = 0.9


class Incomplete(Exception):
    pass


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise Incomplete(f"{path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise Incomplete(f"{path}: not a gpu_compare.py or gpu_paged.py result (no cases)")
    return doc


def median(figures, key, where):
    v = figures.get(key) if isinstance(figures, dict) else None
    if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and x > 0
                                                   for x in v):
        raise Incomplete(f"{where}: no {key} (a list of positive figures)")
    return statistics.median(v)


def cases(doc, key):
    """doc[key] as a list of objects (the results' cases, correctness)."""
    v = (doc or {}).get(key, [])
    if not isinstance(v, list) or not all(isinstance(c, dict) for c in v):
        raise Incomplete(f"{key} is not a list of objects")
    return v


def ratios(doc, path):
    """Prefill shape name -> (params, gllm back to back / cuDNN graph)."""
    out = {}
    for c in cases(doc, "cases"):
        if c.get("suite") != "prefill":
            continue
        where = f"{path}: {c.get('name')}"
        f = c.get("figures")
        p = c.get("params") if isinstance(c.get("params"), dict) else {}
        out[c.get("name")] = (p,
                              median(f, "gllm_back_to_back_tflops", where) /
                              median(f, "cudnn_graph_tflops", where))
    return out


def names(shapes):
    return [prefill_shapes.shape_name(B, H, hkv or H, S, D, dt, c)
            for (B, H, S, D, dt, c), hkv in shapes]


def target(what, bar, figures):
    """figures: (figure, shape) pairs; met when every one is at or above bar."""
    low = min(figures)
    below = sorted((round(v, 4), s) for v, s in figures if v < bar)
    return {"target": what, "at_least": bar, "met": not below, "shapes": len(figures),
            "lowest": round(low[0], 4), "lowest_shape": low[1],
            "below": [{"shape": s, "figure": v} for v, s in below]}


def few(shapes):
    """The first few of a list of shapes, for an error."""
    return f"{len(shapes)} shapes: " + ", ".join(shapes[:4]) + (", ..." if len(shapes) > 4 else "")


def judge(sweep, bench, paged):
    sw, st = ratios(sweep, "sweep"), ratios(bench, "bench")
    swept = names(prefill_shapes.sweep())
    missing = [n for n in swept if n not in sw]
    missing += [n for n in names((s, None) for s in prefill_shapes.STANDARD) if n not in st]
    if missing:
        raise Incomplete("results lack " + few(missing))
    every = [(r, n) for n, (_, r) in sw.items()]
    every += [(r, n + " (standard)") for n, (_, r) in st.items()]
    out = [target("at least cuDNN on every sweep and standard shape", AT_LEAST_CUDNN, every)]
    out.append(target(f"D128 not causal, S >= {D128_LONG_FROM}, against cuDNN", D128_LONG,
                      [(r, n) for n, (p, r) in sw.items()
                       if p.get("head_dim") == 128 and not p.get("causal")
                       and p.get("seq_len", 0) >= D128_LONG_FROM]))
    if paged is not None:
        pp = [(median(c.get("figures"), "gllm_paged_tflops", c.get("name")) /
               median(c.get("figures"), "gllm_dense_tflops", c.get("name")), c.get("name"))
              for c in cases(paged, "cases") if c.get("suite") == "paged-prefill"]
        if not pp:
            raise Incomplete("the paged results hold no chunked prefill")
        out.append(target("chunked prefill against the dense kernel", PAGED_OF_DENSE, pp))
    checks = [(kind, r.get("case"), r.get("ok") is True)
              for doc, kind in ((sweep, "sweep"), (bench, "cases"), (paged, "paged"))
              for r in cases(doc, "correctness")]
    checked = {c for kind, c, _ in checks if kind == "sweep"}
    unchecked = [n for n in swept if n + prefill_shapes.CHECKED not in checked]
    if unchecked:
        raise Incomplete("the sweep was not checked in float64 for " + few(unchecked))
    failed = sorted(str(c) for _, c, ok in checks if not ok)
    out.append({"target": "float64 checks (sweep, cases, paged)", "met": not failed,
                "checks": len(checks), "failed": failed})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", required=True, help="gpu_compare.py --sweep's gpu_compare.json")
    ap.add_argument("--bench", required=True, help="gpu-check.sh's gpu_compare.json")
    ap.add_argument("--paged", help="gpu-check.sh's gpu_paged.json")
    ap.add_argument("--json", help="write the verdict here")
    args = ap.parse_args()
    try:
        sweep, bench = load(args.sweep), load(args.bench)
        paged = load(args.paged) if args.paged else None
        verdict = judge(sweep, bench, paged)
    except Incomplete as e:
        print(f"prefill_targets.py: {e}", file=sys.stderr)
        return 2
    for t in verdict:
        if "lowest" in t:
            line = (f"{t['target']} (>= {t['at_least']}): lowest {t['lowest']:.4f} "
                    f"({t['lowest_shape']}) of {t['shapes']} shapes")
            line += "".join(f"; {b['shape']} {b['figure']:.4f}" for b in t["below"])
        else:
            line = f"{t['target']}: {t['checks']} passed" if t["met"] else \
                f"{t['target']}: failed {', '.join(t['failed'])}"
        print(f"{'met    ' if t['met'] else 'NOT MET'} {line}")
    if not args.paged:
        print("not judged: chunked prefill against dense (no --paged)")
    if args.json:
        meta = sweep.get("meta", {})
        with open(args.json, "w") as f:
            json.dump({"schema": "gllm-prefill-targets/1",
                       "machine": meta.get("device"), "driver": meta.get("driver"),
                       "peers": meta.get("peers"), "when": meta.get("date"),
                       "commit": meta.get("commit"),
                       "inputs": {k: v for k, v in vars(args).items() if k != "json" and v},
                       "targets": verdict}, f, indent=1)
            f.write("\n")
    return 0 if all(t["met"] for t in verdict) else 1


if __name__ == "__main__":
    sys.exit(main())
