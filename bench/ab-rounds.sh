#!/usr/bin/env bash
# Shared by the bench/ab-*.sh scripts: sourced, it defines ab_rounds STEP BUILD..., which for
# ROUNDS rounds (default 2) starts each build's gllmd on a fresh socket, runs STEP BUILD
# SOCKET DIR and stops it, so the builds alternate on one machine. A build needs only
# gllmd, gllmctl and lib/. The backend is cuda; AB_BACKEND=cpu tries a script out here.
ab_rounds() {
  local step=$1 r build dir sock pid
  shift
  for r in $(seq "${ROUNDS:-2}"); do
    for build in "$@"; do
      dir=$(mktemp -d); sock=$dir/gllmd.sock
      LD_LIBRARY_PATH=$PWD/$build/lib "$build/gllmd" --socket "$sock" --backend "${AB_BACKEND:-cuda}" 2> "$dir/log" &
      pid=$!
      for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
      echo "== round $r: $build"
      "$step" "$build" "$sock" "$dir"
      kill -TERM "$pid"; wait "$pid"
    done
  done
}
