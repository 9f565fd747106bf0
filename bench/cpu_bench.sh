#!/usr/bin/env bash
# CPU backend benchmark: gllmctl bench through a fresh gllmd. Usage: bench/cpu_bench.sh [BUILD]
set -euo pipefail
build=${1:-build}
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$build/gllmd" --socket "$tmp/gllmd.sock" 2>"$tmp/gllmd.log" &
pid=$!
for _ in $(seq 100); do [ -S "$tmp/gllmd.sock" ] && break; sleep 0.05; done
echo "== $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
"$build/gllmctl" --socket "$tmp/gllmd.sock" bench --iters "${ITERS:-9}"
kill -TERM "$pid"; wait "$pid" || true
