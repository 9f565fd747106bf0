#!/usr/bin/env bash
# Paged decode kernels of several builds against cuDNN and FA2, alternated in one call on the
# GPU machine: ROUNDS=2 bench/ab-paged.sh BUILD... > log   (gpu_paged.py --skip-check per build;
# a build needs only gllmd, gllmctl and lib/).
set -uo pipefail
for r in $(seq "${ROUNDS:-2}"); do
  for build in "$@"; do
    dir=$(mktemp -d); sock=$dir/gllmd.sock
    LD_LIBRARY_PATH=$PWD/$build/lib "$build/gllmd" --socket "$sock" --backend cuda 2> "$dir/log" &
    pid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    echo "== round $r: $build"
    python3 scripts/gpu_paged.py --socket "$sock" --out "$dir" --skip-check --iters 100 2>&1 | grep "^decode B"
    kill -TERM "$pid"; wait "$pid"
  done
done
