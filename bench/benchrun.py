#!/usr/bin/env python3
"""The "gllm-bench-run/1" result schema (bench/SCHEMA.md): metadata for the harness scripts,
loading and checking a file, and merging several rounds into one run.

As a program:  benchrun.py check FILE...          exit 0 when every file is a valid run, else 2
               benchrun.py merge OUT FILE...      one run whose figures hold every file's rounds
"""
import datetime
import json
import math
import os
import shutil
import subprocess
import sys

SCHEMA = "gllm-bench-run/1"
REQUIRED_META = ("date", "commit", "gllmd_version", "backend", "device", "command", "tool")
# The unit is the end of a figure's key; it says which way is better.
HIGHER = ("_tflops", "_gflops", "_gbps", "_per_s")
LOWER = ("_ms", "_us", "_ns", "_s")
# Figures of the peers gllm is measured against start with the peer's name.
PEERS = ("fa2_", "cudnn_", "torch_")
SLOWDOWN_ENV = "GLLM_BENCH_SLOWDOWN"


class BadRun(ValueError):
    """A file that is not a gllm-bench-run/1 document."""


def direction(figure):
    """+1 when a larger value is better, -1 when a smaller one is, 0 for a unitless figure."""
    if figure.endswith(HIGHER):
        return 1
    if figure.endswith(LOWER):
        return -1
    return 0


def unit(figure):
    for u in HIGHER + LOWER:
        if figure.endswith(u):
            return u[1:]
    return ""


def is_peer(figure):
    return figure.startswith(PEERS)


def case_key(case):
    return f"{case['suite']}: {case['name']}"


def slowdown():
    """The test hook: GLLM_BENCH_SLOWDOWN=F makes a harness report gllm's times as (1 + F)
    times what it measured, so the gate can be shown catching a slowdown without touching
    gllmd. 0 when unset; a malformed value is an error, not silently ignored."""
    raw = os.environ.get(SLOWDOWN_ENV, "")
    if not raw:
        return 0.0
    try:
        f = float(raw)
    except ValueError:
        raise SystemExit(f"{SLOWDOWN_ENV}={raw!r}: want a number such as 0.1")
    if not 0 <= f <= 10 or math.isnan(f):
        raise SystemExit(f"{SLOWDOWN_ENV}={raw!r}: want 0 to 10")
    return f


def _run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return p.stdout.strip() if p.returncode == 0 else ""


def commit():
    """GLLM_COMMIT, else HEAD of the checkout these scripts are in ("+dirty" when tracked files
    differ from it: a run of uncommitted changes is not HEAD's), else "unknown"."""
    env = os.environ.get("GLLM_COMMIT", "").strip()
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    head = _run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"])
    if not head:
        return "unknown"
    changed = _run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"])
    return head + "+dirty" if changed else head


def nvidia_smi():
    """Driver version, SM clock (MHz) and name of GPU 0 from nvidia-smi; {} without it."""
    if not shutil.which("nvidia-smi"):
        return {}
    out = _run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,name",
                "--format=csv,noheader"])
    if not out:
        return {}
    fields = [f.strip() for f in out.splitlines()[0].split(",")]
    meta = {"driver": fields[0]} if fields and fields[0] else {}
    if len(fields) > 1 and fields[1].split()[:1] and fields[1].split()[0].isdigit():
        meta["sm_clock_mhz"] = int(fields[1].split()[0])
    if len(fields) > 2 and fields[2]:
        meta["gpu"] = fields[2]
    return meta


def meta(tool, caps, argv, iters=None, peers=None):
    """The metadata block of a run; caps is gllmd's hello reply (gllm_raw.Client.caps)."""
    devices = caps.get("devices") or [{}]
    m = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
         "commit": commit(), "gllmd_version": str(caps.get("daemon", "unknown")),
         "backend": str(caps.get("backend", "unknown")),
         "device": str(devices[0].get("name", "unknown"))}
    m.update(nvidia_smi())
    if peers:
        m["peers"] = peers
    m["command"] = " ".join(argv)
    m["tool"] = tool
    if iters is not None:
        m["iters"] = iters
    s = slowdown()
    if s:
        m["test_slowdown"] = s
    return m


def torch_peers(torch):
    """Versions of the peers timed through PyTorch SDPA."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    p = {"pytorch": torch.__version__, "cuda": str(torch.version.cuda)}
    if cudnn:
        p["cudnn"] = f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn >= 10000 else str(cudnn)
    return p


def case(suite, name, params, figures, gate):
    """A case with one round: every finite figure as a list of one value."""
    figs = {k: [round(float(v), 4)] for k, v in figures.items()
            if v is not None and math.isfinite(float(v))}
    return {"suite": suite, "name": name, "params": params, "figures": figs,
            "gate": [g for g in gate if g in figs]}


def write(path, meta_, cases):
    with open(path, "w") as f:
        json.dump({"schema": SCHEMA, "meta": meta_, "cases": cases}, f, indent=1)
        f.write("\n")


def check(doc, where="run"):
    """Raises BadRun unless doc is a valid gllm-bench-run/1 object; returns it."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadRun(f"{where}: not a {SCHEMA} document (schema {doc.get('schema') if isinstance(doc, dict) else None!r})")
    m = doc.get("meta")
    if not isinstance(m, dict):
        raise BadRun(f"{where}: no meta object")
    for k in REQUIRED_META:
        if not isinstance(m.get(k), str) or not m[k]:
            raise BadRun(f"{where}: meta.{k} missing or not a string")
    cases = doc.get("cases")
    if not isinstance(cases, list):
        raise BadRun(f"{where}: cases missing or not a list")
    seen = set()
    for i, c in enumerate(cases):
        at = f"{where}: cases[{i}]"
        if not isinstance(c, dict) or not all(isinstance(c.get(k), str) and c[k] for k in ("suite", "name")):
            raise BadRun(f"{at}: suite and name must be strings")
        key = case_key(c)
        if key in seen:
            raise BadRun(f"{at}: {key!r} appears twice")
        seen.add(key)
        if not isinstance(c.get("params", {}), dict):
            raise BadRun(f"{at}: params must be an object")
        figs = c.get("figures")
        if not isinstance(figs, dict) or not figs:
            raise BadRun(f"{at}: figures missing or empty")
        for name, vals in figs.items():
            if (not isinstance(vals, list) or not vals or
                    not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                            for v in vals)):
                raise BadRun(f"{at}: figure {name!r} must be a non-empty list of finite numbers")
        gate = c.get("gate", [])
        if not isinstance(gate, list):
            raise BadRun(f"{at}: gate must be a list")
        for g in gate:
            if g not in figs or direction(g) == 0 or is_peer(g):
                raise BadRun(f"{at}: gate names {g!r}, which is not one of gllm's figures with a unit")
    return doc


def load(path):
    """A checked run from a file; BadRun on anything wrong with it."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise BadRun(f"{path}: {e}")
    return check(doc, path)


def merge(docs):
    """One run from several (rounds of the same benchmarks, or different benchmarks): each
    case's figures hold the values of every run that has it, in order. The metadata is the
    first run's, with each tool's command kept and the rounds counted."""
    out = {"schema": SCHEMA, "meta": dict(docs[0]["meta"]), "cases": []}
    by_key = {}
    commands, dates = [], []
    for d in docs:
        if d["meta"]["command"] not in commands:
            commands.append(d["meta"]["command"])
        dates.append(d["meta"]["date"])
        for c in d["cases"]:
            k = case_key(c)
            if k not in by_key:
                by_key[k] = {"suite": c["suite"], "name": c["name"], "params": c.get("params", {}),
                             "figures": {}, "gate": list(c.get("gate", []))}
                out["cases"].append(by_key[k])
            tgt = by_key[k]
            for f, vals in c["figures"].items():
                tgt["figures"].setdefault(f, []).extend(vals)
            for g in c.get("gate", []):
                if g not in tgt["gate"]:
                    tgt["gate"].append(g)
    if len(docs) > 1:
        out["meta"]["command"] = " ; ".join(commands)
        out["meta"]["tool"] = " ".join(sorted({d["meta"]["tool"] for d in docs}))
        out["meta"]["date"] = min(dates)
        out["meta"]["merged_runs"] = len(docs)
    return out


def main(argv):
    if len(argv) >= 2 and argv[0] == "check":
        try:
            for p in argv[1:]:
                load(p)
        except BadRun as e:
            print(f"benchrun: {e}", file=sys.stderr)
            return 2
        return 0
    if len(argv) >= 3 and argv[0] == "merge":
        try:
            docs = [load(p) for p in argv[2:]]
        except BadRun as e:
            print(f"benchrun: {e}", file=sys.stderr)
            return 2
        with open(argv[1], "w") as f:
            json.dump(merge(docs), f, indent=1)
            f.write("\n")
        return 0
    print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
