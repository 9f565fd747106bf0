#!/usr/bin/env bash
# Decode latency of several builds, alternated in one call on the GPU machine:
#   ROUNDS=2 bench/ab-latency.sh BUILD... > log
# Each round starts each build's gllmd and runs its own `gllmctl bench --decode`; a build
# needs only gllmd, gllmctl and lib/.
set -uo pipefail
for r in $(seq "${ROUNDS:-2}"); do
  for build in "$@"; do
    dir=$(mktemp -d); sock=$dir/gllmd.sock
    LD_LIBRARY_PATH=$PWD/$build/lib "$build/gllmd" --socket "$sock" --backend cuda 2> "$dir/log" &
    pid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    echo "== round $r: $build"
    "$build/gllmctl" --socket "$sock" bench --decode --iters 2000 | grep "^decode"
    "$build/gllmctl" --socket "$sock" status | grep -i "requests"
    kill -TERM "$pid"; wait "$pid"
  done
done
