#!/usr/bin/env bash
# Times another build's kernels through gpu_compare (two correctness cases, then the
# benchmark shapes), for comparing kernel variants in the same call as gpu-check.sh.
# Usage: tests/gpu/gpu-variant.sh BUILD_DIR OUT_DIR [gpu_compare.py options]
set -uo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
mkdir -p "$out"
sock=$(mktemp -d)/gllmd.sock
"$build/gllmd" --socket "$sock" --backend cuda 2> "$out/gllmd-variant.log" &
pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
shift 2
PYTHONUNBUFFERED=1 python3 "$(dirname "$0")/gpu_compare.py" --socket "$sock" --out "$out" --skip-check "$@"
rc=$?
kill -TERM "$pid"; wait "$pid"
exit $rc
