#!/usr/bin/env python3
"""gllmctl end to end: attn on random .npy inputs against a float64 NumPy reference."""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed for", sys.executable, "- install python3-numpy")
    sys.exit(77)

TOL = {"f32": 1e-5, "f16": 3e-3, "bf16": 2e-2}
# Absolute error of the log-sum-exp, which sees the inputs' rounding directly.
LSE_TOL = {"f32": 1e-4, "f16": 5e-3, "bf16": 5e-2}
NAME = {np.float32: "f32", np.float16: "f16"}


def reference(q, k, v, causal, scale=None):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    k = np.repeat(k, Hq // Hkv, axis=1)
    v = np.repeat(v, Hq // Hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * (scale if scale is not None else 1 / np.sqrt(D))
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Skv)[None, :]
        s = np.where(j <= i + Skv - Sq, s, -np.inf)
    # A row that sees no key (causal, Sq > Skv) is defined as zeros with lse = -inf.
    m = s.max(axis=-1, keepdims=True)
    empty = np.isneginf(m)
    p = np.exp(s - np.where(empty, 0.0, m))
    total = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(total))[..., 0]
    out = np.einsum("bhij,bhjd->bhid", p / np.where(empty, 1.0, total), v)
    return out, lse


def rel_err(got, want):
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


class Daemon:
    def __init__(self, gllmd, tmp):
        self.socket = os.path.join(tmp, "gllmd.sock")
        backend = os.environ.get("GLLM_TEST_BACKEND") or "cpu"
        self.backend = backend
        self.proc = subprocess.Popen([gllmd, "--socket", self.socket, "--threads", "2",
                                      "--backend", backend])
        for _ in range(1000):
            if os.path.exists(self.socket):
                return
            time.sleep(0.01)
        raise RuntimeError("gllmd did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gllmd", required=True)
    ap.add_argument("--gllmctl", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gllm-npy-")
    failures = []
    passed = 0
    d = Daemon(args.gllmd, tmp)

    def ctl(*argv):
        return subprocess.run([args.gllmctl, "--socket", d.socket, *argv],
                              capture_output=True, text=True)

    def save(name, a):
        path = os.path.join(tmp, name)
        np.save(path, a)
        return path

    rng = np.random.default_rng(2026)
    cases = [
        # (B, Hq, Hkv, Sq, Skv, D, file dtype, --dtype, causal, scale)
        (2, 4, 2, 77, 130, 64, np.float32, "f32", False, None),
        (1, 8, 8, 128, 128, 128, np.float32, "f32", True, None),
        (1, 4, 1, 200, 64, 128, np.float32, "f32", True, 0.05),
        (2, 4, 4, 96, 96, 64, np.float16, "f16", True, None),
        (1, 8, 2, 64, 300, 128, np.float16, "f16", False, None),
        (1, 4, 2, 100, 100, 128, np.float32, "bf16", True, None),
        (2, 2, 1, 50, 90, 64, np.float32, "bf16", False, None),
        (1, 4, 4, 64, 64, 64, np.float16, "f32", False, None),
    ]
    for n, (B, Hq, Hkv, Sq, Skv, D, fdt, jdt, causal, scale) in enumerate(cases):
        q = rng.standard_normal((B, Hq, Sq, D)).astype(fdt)
        k = rng.standard_normal((B, Hkv, Skv, D)).astype(fdt)
        v = rng.standard_normal((B, Hkv, Skv, D)).astype(fdt)
        out, lse_path = os.path.join(tmp, f"out{n}.npy"), os.path.join(tmp, f"lse{n}.npy")
        argv = ["attn", save(f"q{n}.npy", q), save(f"k{n}.npy", k), save(f"v{n}.npy", v),
                "-o", out, "--dtype", jdt, "--lse", lse_path]
        if causal:
            argv.append("--causal")
        if scale is not None:
            argv += ["--scale", str(scale)]
        r = ctl(*argv)
        name = f"B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Skv{Skv} D{D} {np.dtype(fdt).name}->{jdt}" + \
            (" causal" if causal else "")
        if r.returncode != 0:
            failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        got = np.load(out)
        want, want_lse = reference(q, k, v, causal, scale)
        err = rel_err(got, want)
        got_lse = np.load(lse_path)
        same_inf = np.array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
        finite = ~np.isneginf(want_lse)
        lse_err = float(np.abs(got_lse[finite] - want_lse[finite]).max()) if same_inf else np.inf
        # The output is written in the file's dtype: the looser of the two bounds applies.
        tol = max(TOL[jdt], TOL[NAME[fdt]])
        ok = got.dtype == fdt and got.shape == q.shape and err <= tol and lse_err <= LSE_TOL[jdt]
        print(f"{'ok  ' if ok else 'FAIL'} {name}: rel err {err:.2e} (tol {tol:.0e}), "
              f"lse abs err {lse_err:.1e}, out dtype {got.dtype}")
        if ok:
            passed += 1
        else:
            failures.append(name)

    # Bad input: a clear message and a non-zero exit, never a crash.
    q = rng.standard_normal((1, 4, 16, 64)).astype(np.float32)
    k_bad = rng.standard_normal((1, 3, 16, 64)).astype(np.float32)
    k_d = rng.standard_normal((1, 4, 16, 32)).astype(np.float32)
    bad = os.path.join(tmp, "bad.npy")
    with open(bad, "wb") as f:
        f.write(b"not numpy")
    checks = [
        ("GQA heads not dividing", ["attn", save("bq.npy", q), save("bk.npy", k_bad),
                                    save("bv.npy", k_bad), "-o", os.path.join(tmp, "x.npy")],
         "multiple"),
        ("head dims differ", ["attn", save("cq.npy", q), save("ck.npy", k_d), save("cv.npy", k_d),
                              "-o", os.path.join(tmp, "x.npy")], "D="),
        ("not a .npy file", ["attn", bad, bad, bad, "-o", os.path.join(tmp, "x.npy")], "not a .npy"),
        ("rank 3", ["attn", save("r3.npy", q[0]), save("r3k.npy", q[0]), save("r3v.npy", q[0]),
                    "-o", os.path.join(tmp, "x.npy")], "rank 3"),
        ("missing output", ["attn", bad, bad, bad], "-o"),
    ]
    for name, argv, needle in checks:
        r = ctl(*argv)
        ok = r.returncode != 0 and needle in r.stderr and "Segmentation" not in r.stderr
        print(f"{'ok  ' if ok else 'FAIL'} bad input, {name}: exit {r.returncode}: {r.stderr.strip()}")
        passed += ok
        if not ok:
            failures.append(name)

    r = ctl("status", "--json")
    ok = r.returncode == 0 and f'"backend": "{d.backend}"' in r.stdout
    print(f"{'ok  ' if ok else 'FAIL'} status --json while running: exit {r.returncode}")
    passed += ok
    if not ok:
        failures.append("status --json")

    rc = d.stop()
    if rc != 0:
        failures.append(f"gllmd exited {rc} on SIGTERM")
    r = ctl("status")
    ok = r.returncode == 3
    print(f"{'ok  ' if ok else 'FAIL'} status after stop exits 3 (got {r.returncode})")
    passed += ok
    if not ok:
        failures.append("status exit code when stopped")

    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {len(failures)} failed")
    for f in failures:
        print("  failed:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
