#!/usr/bin/env bash
# The CI and release workflows and the deploy/ manifests: YAML that yamllint accepts
# (.yamllint), and every workflow `run:` script clean under shellcheck, with no GitHub
# expression spliced into a script (they reach scripts through env:). A schema check of the
# workflows (npx @action-validator/cli) needs the network and is run by hand
# (docs/packaging.md). Usage: workflows.sh SOURCE_DIR
set -u
src=$1 fail=0
command -v yamllint >/dev/null || { echo "SKIPPED: yamllint not installed"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIPPED: python3-yaml not installed"; exit 77; }
cd "$src" || exit 1
files=$(ls .github/workflows/*.yml deploy/*.yaml 2>/dev/null)
[ -n "$files" ] || { echo "FAIL: no workflow or manifest found"; exit 1; }
# shellcheck disable=SC2086 # one word per file
yamllint -s $files || fail=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" .github/workflows/*.yml <<'PY' || fail=1
import sys, yaml
out, paths = sys.argv[1], sys.argv[2:]
bad = 0
n = 0
for path in paths:
    doc = yaml.safe_load(open(path))
    for job_name, job in doc["jobs"].items():
        for i, step in enumerate(job.get("steps", [])):
            run = step.get("run")
            if run is None:
                continue
            if "${{" in run:
                print(f"FAIL: {path}: {job_name} step {i}: a GitHub expression inside run:")
                bad = 1
            n += 1
            name = path.replace("/", "_").lstrip(".")
            with open(f"{out}/{name}.{job_name}.{i}.sh", "w") as f:
                f.write("#!/bin/bash\n" + run)
print(f"{n} run: scripts in {len(paths)} workflows")
sys.exit(bad)
PY
if command -v shellcheck >/dev/null; then
  shellcheck -S info "$tmp"/*.sh || fail=1
else
  echo "shellcheck not installed: run: scripts not checked"
fi
[ "$fail" = 0 ] && echo "workflows and manifests pass"
exit "$fail"
