#!/usr/bin/env bash
# B64/B1 decode latency with and without pinning gllmd's threads and the client to cores.
set -uo pipefail
b=build-ab/base
for r in 1 2; do
  for mode in plain pinned; do
    dir=$(mktemp -d); sock=$dir/s
    if [ $mode = pinned ]; then pre="taskset -c 2-5"; cpre="taskset -c 8"; else pre=""; cpre=""; fi
    LD_LIBRARY_PATH=$PWD/$b/lib $pre $b/gllmd --socket $sock --backend cuda 2> $dir/log & pid=$!
    for _ in $(seq 200); do [ -S $sock ] && break; sleep 0.05; done
    echo "== round $r: $mode"
    LD_LIBRARY_PATH=$PWD/$b/lib $cpre $b/gllmctl --socket $sock bench --decode --iters 2000 | grep "^decode" | grep -v -E "sleep|arena" | cut -c1-130
    kill -TERM $pid; wait $pid
  done
done
