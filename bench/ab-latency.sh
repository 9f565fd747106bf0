#!/usr/bin/env bash
# Decode latency of two builds, alternated in one call on the GPU machine:
#   bench/ab-latency.sh BUILD_A BUILD_B [ROUNDS] > log
# Each round starts each build's gllmd and runs its own `gllmctl bench --decode`.
set -uo pipefail
a=${1:?build A}; b=${2:?build B}; rounds=${3:-2}
for r in $(seq "$rounds"); do
  for build in "$a" "$b"; do
    dir=$(mktemp -d); sock=$dir/gllmd.sock
    LD_LIBRARY_PATH=$PWD/$build/lib "$build/gllmd" --socket "$sock" --backend cuda 2> "$dir/log" &
    pid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    echo "== round $r: $build"
    LD_LIBRARY_PATH=$PWD/$build/lib "$build/gllmctl" --socket "$sock" bench --decode --iters 2000 | tail -4
    kill -TERM "$pid"; wait "$pid"
  done
done
