#!/usr/bin/env python3
"""kernels/tools/hp_ab.py without a GPU: a fake harness that prints hp_trace's line and writes
an O, so that the alternation, the O check (bit for bit, --tol), the medians and the errors are
checked.

Usage: test_hp_ab.py SOURCE_DIR
"""
import importlib.util
import json
import os
import stat
import subprocess
import sys
import tempfile

from checklist import ok, summary

FAKE = r'''#!{python}
# A stand-in for hp_trace: D B H S causal out.bin; FAKE_US its time, FAKE_DELTA added to O,
# FAKE_NAN an O with a NaN, FAKE_FAIL an exit 3, FAKE_HANG a sleep of that many seconds (a
# deadlocked kernel), FAKE_LOG a file each run appends its FAKE_NAME and HP_LAYOUT to,
# FAKE_FLIP a file whose count of O writes so far, odd or even, is added to O[0] (a result
# that depends on the run).
import os, sys, time
import numpy as np
e = os.environ
d, b, h, s, c, out = sys.argv[1:7]
if e.get("FAKE_LOG"):
    with open(e["FAKE_LOG"], "a") as f:
        f.write(f"{{e.get('FAKE_NAME')}} {{s}} {{e.get('HP_LAYOUT', '-')}} {{'out' if e.get('HP_OUT') else 'time'}}\n")
if e.get("FAKE_HANG"):
    time.sleep(float(e["FAKE_HANG"]))
if e.get("FAKE_FAIL"):
    print("boom", file=sys.stderr)
    sys.exit(3)
if e.get("HP_OUT"):
    o = (np.arange(64) * 0.25 + float(e.get("FAKE_DELTA", "0"))).astype(np.float16)
    if e.get("FAKE_NAN"):
        o[3] = np.nan
    if e.get("FAKE_FLIP"):
        n = os.path.getsize(e["FAKE_FLIP"]) if os.path.exists(e["FAKE_FLIP"]) else 0
        with open(e["FAKE_FLIP"], "a") as f:
            f.write("x")
        o[0] += n % 2
    o.tofile(e["HP_OUT"])
us = float(e.get("FAKE_US", "100")) * (2 if s == "2048" else 1)
print(f"D{{d}} B{{b}} H{{h}} S{{s}} causal {{c}}: grid 132, {{us:.1f}} us, 1.0 TFLOP/s, 1700 MHz, tensor 50.0%")
'''


def main():
    src = sys.argv[1]
    if importlib.util.find_spec("numpy") is None:   # hp_ab.py and the fake harness need it
        print("skipped: no numpy")
        return 77
    tool = os.path.join(src, "kernels", "tools", "hp_ab.py")
    tmp = tempfile.mkdtemp(prefix="hp-ab-test-")
    fake = os.path.join(tmp, "fake_harness")
    with open(fake, "w") as f:
        f.write(FAKE.format(python=sys.executable))
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    log = os.path.join(tmp, "runs.log")

    def ab(*args, env=None):
        full = dict(os.environ, FAKE_LOG=log, GLLM_COMMIT="abc123", **(env or {}))
        return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True,
                              timeout=120, env=full)

    shapes = ["--shape", "128 32 16 512 1", "--shape", "128 8 16 2048 0"]
    out = os.path.join(tmp, "ab.json")
    r = ab("--variant", f"base={fake},FAKE_NAME=base", "--variant",
           f"slow={fake},FAKE_NAME=slow,FAKE_US=110", *shapes, "--rounds", "2", "--json", out)
    ok(r.returncode == 0, f"two variants, same O: exit 0 (got {r.returncode}: {r.stderr.strip()})")
    doc = json.load(open(out)) if os.path.exists(out) else {}
    s512 = doc.get("shapes", {}).get("D128 B32 H16 S512 causal", {})
    ok(doc.get("schema") == "gllm-hp-ab/1" and doc.get("rounds") == 2, "JSON: schema and rounds")
    ok(doc.get("commit") == "abc123", f"JSON: the commit benchrun names (GLLM_COMMIT): {doc.get('commit')}")
    ok(s512.get("check") == {"slow": "identical"}, f"O compared bit for bit: {s512.get('check')}")
    ok(s512.get("us") == {"base": [100.0, 100.0], "slow": [110.0, 110.0]}, f"times: {s512.get('us')}")
    ok(s512.get("change") == {"slow": "+10.0%"}, f"change against the first: {s512.get('change')}")
    s2k = doc.get("shapes", {}).get("D128 B8 H16 S2048", {})
    ok(s2k.get("median_us") == {"base": 200.0, "slow": 220.0}, f"second shape: {s2k.get('median_us')}")
    ok("+10.0%" in r.stdout and "D128 B8 H16 S2048" in r.stdout, "the summary table")
    runs = open(log).read().split("\n")[:-1] if os.path.exists(log) else []
    timed = [x for x in runs if x.endswith(" time")]
    want = [f"{n} {s} bhsd time" for _ in range(2) for s in ("512", "2048") for n in ("base", "slow")]
    ok(timed == want, f"rounds alternate the variants within each shape, HP_LAYOUT=bhsd: {timed}")
    ok(sum(x.endswith(" out") for x in runs) == 4, "one O run per variant and shape")

    os.remove(log)
    r = ab("--variant", f"base={fake}", "--variant", f"moved={fake},FAKE_DELTA=0.01",
           "--shape", "64 1 1 128 0", "--rounds", "1", "--layout", "bshd")
    ok(r.returncode == 1 and "moved: DIFFER" in r.stdout, f"O off by 0.01: DIFFER, exit 1 ({r.returncode})")
    ok(open(log).read().split()[2] == "-", "--layout bshd: no HP_LAYOUT")
    r = ab("--variant", f"base={fake}", "--variant", f"moved={fake},FAKE_DELTA=0.01",
           "--shape", "64 1 1 128 0", "--rounds", "1", "--tol", "1e-3")
    ok(r.returncode == 0 and "moved: within tol" in r.stdout,
       f"--tol 1e-3 of max |O| 15.75 takes it: exit {r.returncode}, {r.stdout.splitlines()[:1]}")
    r = ab("--variant", f"base={fake}", "--variant", f"nan={fake},FAKE_NAN=1",
           "--shape", "64 1 1 128 0", "--rounds", "1", "--tol", "1")
    ok(r.returncode == 1 and "nan: DIFFER: not finite" in r.stdout, "an O with a NaN: DIFFER")
    flip = os.path.join(tmp, "flip")
    r = ab("--variant", f"base={fake}", "--variant", f"racy={fake},FAKE_FLIP={flip}",
           "--shape", "64 1 1 128 0", "--rounds", "1", "--repeat", "3", "--tol", "1", "--json", out)
    check = json.load(open(out))["shapes"]["D64 B1 H1 S128"]["check"] if r.returncode != 2 else {}
    ok(r.returncode == 1 and check.get("racy", "").startswith("NOT REPEATABLE: 2 different O in 3 runs")
       and "base" not in check,
       f"--repeat 3: the variant whose O changes between runs named, exit 1 ({r.returncode}: {check})")
    ok(os.path.getsize(flip) == 3, f"--repeat 3: three O runs of the racy variant ({os.path.getsize(flip)})")
    r = ab("--variant", f"base={fake}", "--variant", f"same={fake}", "--shape", "64 1 1 128 0",
           "--rounds", "1", "--repeat", "2", "--json", out)
    ok(r.returncode == 0 and json.load(open(out)).get("repeat") == 2,
       f"--repeat 2 of steady variants: exit 0, repeat in the JSON ({r.returncode})")
    r = ab("--variant", f"base={fake}", "--shape", "64 1 1 128 0", "--repeat", "0")
    ok(r.returncode == 2 and "--repeat must be at least 1" in r.stderr, "--repeat 0 refused")
    r = ab("--variant", f"base={fake}", "--variant", f"bad={fake},FAKE_FAIL=1",
           "--shape", "64 1 1 128 0", "--rounds", "1")
    ok(r.returncode == 2 and "bad D64 B1 H1 S128: exit 3: boom" in r.stderr,
       f"a failing harness: exit 2 and its message ({r.returncode}: {r.stderr.strip()})")
    r = ab("--variant", f"base={fake}", "--variant", f"hung={fake},FAKE_HANG=30",
           "--shape", "64 1 1 128 0", "--rounds", "1", "--timeout", "2")
    ok(r.returncode == 2 and "hung D64 B1 H1 S128: no result in 2 s" in r.stderr,
       f"a hung harness: killed at --timeout, exit 2 ({r.returncode}: {r.stderr.strip()})")
    r = ab("--variant", f"base={fake}", "--shape", "64 1 1 128 0", "--timeout", "0")
    ok(r.returncode == 2 and "--timeout must be more than 0" in r.stderr, "--timeout 0 refused")
    r = ab("--variant", f"base={os.path.join(tmp, 'missing')}", "--shape", "64 1 1 128 0",
           "--no-check", "--rounds", "1")
    ok(r.returncode == 2 and "base D64 B1 H1 S128" in r.stderr, "a missing binary: exit 2")
    for bad in (["--shape", "128 32 16"], ["--shape", "128 32 16 512 2"]):
        r = ab("--variant", f"base={fake}", *bad)
        ok(r.returncode == 2 and "shape" in r.stderr, f"bad shape {bad[1]!r} refused")
    r = ab("--variant", f"base{fake}", "--shape", "64 1 1 128 0")
    ok(r.returncode == 2 and "NAME=PATH" in r.stderr, "a variant without a name refused")
    r = ab("--variant", f"a={fake}", "--variant", f"a={fake}", "--shape", "64 1 1 128 0")
    ok(r.returncode == 2 and "differ" in r.stderr, "two variants of one name refused")

    return summary()


if __name__ == "__main__":
    sys.exit(main())
