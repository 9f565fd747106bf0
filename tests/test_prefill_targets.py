#!/usr/bin/env python3
"""tests/gpu/prefill_targets.py without a GPU: results made up in gpu_compare.py's and
gpu_paged.py's form, each target met and missed, and incomplete or unreadable results refused.

Usage: test_prefill_targets.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

from checklist import ok, summary


def main():
    src = sys.argv[1]
    sys.path.insert(0, os.path.join(src, "tests", "gpu"))
    import prefill_shapes
    script = os.path.join(src, "tests", "gpu", "prefill_targets.py")
    tmp = tempfile.mkdtemp(prefix="prefill-targets-")

    def prefill(shapes, ratio):
        cases, checks = [], []
        for (B, H, S, D, dt, c), hkv in shapes:
            name = prefill_shapes.shape_name(B, H, hkv or H, S, D, dt, c)
            r = ratio.get(name, 1.2)
            cases.append({"suite": "prefill", "name": name,
                          "params": {"batch": B, "heads": H, "kv_heads": hkv or H, "seq_len": S,
                                     "head_dim": D, "dtype": dt, "causal": c},
                          "figures": {"gllm_back_to_back_tflops": [600.0 * r, 600.0 * r + 1],
                                      "cudnn_graph_tflops": [600.0, 601.0]}})
            checks.append({"case": name + prefill_shapes.CHECKED, "rel_err": 1e-4, "ok": True})
        return cases, checks

    def run(ratio=None, paged=0.95, fail_check=None, drop=None, unchecked=None, use_paged=True,
            twice=False, zero=None):
        ratio = ratio or {}
        sc, schecks = prefill(prefill_shapes.sweep(), ratio)
        bc, _ = prefill([(s, None) for s in prefill_shapes.STANDARD], ratio)
        sc = [c for c in sc if c["name"] != drop]
        for c in sc:
            if c["name"] == zero:
                c["figures"]["cudnn_graph_tflops"] = [0.0]
        schecks = [c for c in schecks if c["case"] != (unchecked or "") + prefill_shapes.CHECKED]
        cases = [{"case": "B1 Hq8 Hkv8 Sq256 Skv256 D128 f16", "rel_err": 1e-4, "ok": True},
                 {"case": "B2 Hq8 Hkv2 Sq300 Skv200 D128 bf16 ramp 1200", "rel_err": 3e-3,
                  "ok": fail_check is None}]
        if twice:     # a case run twice under one name: the second failed
            cases += [dict(cases[0]), dict(cases[0], ok=False)]
        meta = {"device": "NVIDIA H100", "date": "2026-11-28T20:00:00Z", "commit": "abc"}
        docs = {"sweep": {"meta": meta, "cases": sc, "correctness": schecks},
                "bench": {"meta": meta, "cases": bc, "correctness": cases},
                "paged": {"meta": meta, "correctness": [{"case": "decode B3", "ok": True}],
                          "cases": [{"suite": "paged-decode", "name": "B1", "figures": {}}] +
                          [{"suite": "paged-prefill", "name": f"P{i}",
                            "figures": {"gllm_paged_tflops": [500.0 * (paged if i == 1 else 0.95)],
                                        "gllm_dense_tflops": [500.0]}} for i in range(3)]}}
        paths = {}
        for k, d in docs.items():
            paths[k] = os.path.join(tmp, k + ".json")
            with open(paths[k], "w") as f:
                json.dump(d, f)
        out = os.path.join(tmp, "verdict.json")
        if os.path.exists(out):
            os.unlink(out)
        argv = [sys.executable, script, "--sweep", paths["sweep"], "--bench", paths["bench"],
                "--json", out] + (["--paged", paths["paged"]] if use_paged else [])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        verdict = json.load(open(out)) if os.path.exists(out) else None
        return r, verdict

    r, v = run()
    ok(r.returncode == 0 and r.stdout.count("met    ") == 4 and "NOT MET" not in r.stdout,
       "every target met: status 0, four lines")
    ok(v is not None and v["schema"] == "gllm-prefill-targets/1" and v["machine"] == "NVIDIA H100"
       and len(v["targets"]) == 4 and all(t["met"] for t in v["targets"]), "the verdict's JSON")
    ok(v is not None and v["targets"][0]["shapes"] == 60 and v["targets"][1]["shapes"] == 12
       and v["targets"][3]["checks"] == 56 + 2 + 1,
       "60 shapes against cuDNN, 12 of them D128 not causal from S2k (GQA too), 59 float64 checks")
    ok(v is not None and abs(v["targets"][0]["lowest"] - 1.2) < 0.01,
       "the lowest ratio is the medians' (gllm back to back against cuDNN's graph)")

    r, v = run({"B32 H32 S512 D64 f16 causal": 0.98})
    ok(r.returncode == 1 and "NOT MET at least cuDNN" in r.stdout and
       "B32 H32 S512 D64 f16 causal 0.9800" in r.stdout, "a sweep shape below cuDNN named")
    ok(v is not None and not v["targets"][0]["met"] and v["targets"][1]["met"],
       "that shape fails the first target only")
    r, v = run({"B4 H32 S2048 D128 f16 causal": 0.99})
    ok(r.returncode == 1 and "B4 H32 S2048 D128 f16 causal (standard) 0.9900" in r.stdout,
       "a standard shape below cuDNN named")
    r, v = run({"B8 H16 S2048 D128 bf16": 1.08})
    ok(r.returncode == 1 and v is not None and v["targets"][0]["met"] and
       not v["targets"][1]["met"] and v["targets"][1]["lowest_shape"] == "B8 H16 S2048 D128 bf16",
       "D128 not causal S2k at 1.08: the 1.1x target missed")
    r, v = run({"B8 H32 Hkv8 S2048 D128 bf16": 1.05})
    ok(r.returncode == 1 and v is not None and not v["targets"][1]["met"],
       "GQA counts toward the 1.1x target")
    r, v = run({"B8 H16 S2048 D128 bf16 causal": 1.05, "B32 H16 S512 D128 f16": 1.02})
    ok(r.returncode == 0, "causal shapes and S < 2k need 1.0x only")
    r, v = run(paged=0.85)
    ok(r.returncode == 1 and "NOT MET chunked prefill" in r.stdout and "P1 0.8500" in r.stdout,
       "chunked prefill below 0.9x dense named")
    r, v = run(fail_check=True)
    ok(r.returncode == 1 and "NOT MET float64" in r.stdout and "ramp 1200" in r.stdout,
       "a failed float64 case named")
    r, v = run(twice=True)
    ok(r.returncode == 1 and "NOT MET float64" in r.stdout,
       "a failed check not hidden by a passed one of the same name")
    r, v = run(zero="B8 H16 S2048 D128 f16")
    ok(r.returncode == 2 and "cudnn_graph_tflops" in r.stderr and v is None,
       "a figure of 0: status 2, not a division by zero")
    r, v = run(use_paged=False)
    ok(r.returncode == 0 and "not judged: chunked prefill" in r.stdout and v is not None and
       len(v["targets"]) == 3, "without --paged the chunked prefill is not judged")
    r, v = run(drop="B1 H16 S16384 D128 bf16")
    ok(r.returncode == 2 and "B1 H16 S16384 D128 bf16" in r.stderr and v is None,
       "a sweep shape missing: status 2, named, no verdict")
    r, v = run(unchecked="B2 H32 Hkv4 S8192 D128 bf16 causal")
    ok(r.returncode == 2 and "not checked in float64" in r.stderr,
       "a sweep shape not checked in float64: status 2")
    with open(os.path.join(tmp, "sweep.json"), "w") as f:
        f.write("{not json")
    r = subprocess.run([sys.executable, script, "--sweep", os.path.join(tmp, "sweep.json"),
                        "--bench", os.path.join(tmp, "bench.json")],
                       capture_output=True, text=True, timeout=60)
    ok(r.returncode == 2 and "sweep.json" in r.stderr, "unreadable results: status 2")

    return summary()


if __name__ == "__main__":
    sys.exit(main())
