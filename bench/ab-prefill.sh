#!/usr/bin/env bash
# Prefill of one build against PyTorch, as a function to source on the GPU machine:
#   . bench/ab-prefill.sh; one BUILD NAME [gpu_compare.py args]   (logs in $OUT/NAME)
# Calling it for two builds in one device call gives an A/B on the same machine.
one() { b=$1; n=$2; shift 2; mkdir -p "$OUT/$n"; s=$(mktemp -d)/s
  LD_LIBRARY_PATH=$PWD/$b/lib "$b/gllmd" --socket "$s" --backend cuda 2> "$OUT/$n/gllmd.log" & p=$!
  for _ in $(seq 200); do [ -S "$s" ] && break; sleep 0.05; done
  python3 tests/gpu/gpu_compare.py --socket "$s" --out "$OUT/$n" "$@" > "$OUT/$n/log.txt" 2>&1
  kill "$p"; wait "$p"; }
