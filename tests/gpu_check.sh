#!/usr/bin/env bash
# ctest entry for the GPU checks: runs tests/gpu/gpu-check.sh where an NVIDIA GPU answers,
# and reports itself skipped (exit 77) where none does, as in CI.
set -u
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: no NVIDIA GPU here. The CUDA backend is checked on a GPU machine with"
  echo "tests/gpu/build-gpu.sh (here) and tests/gpu/gpu-check.sh BUILD OUT (there); results in bench/results/."
  exit 77
fi
out=$(mktemp -d)
exec "$(dirname "$0")/gpu/gpu-check.sh" "$1" "$out"
