#!/usr/bin/env bash
# ctest entry for the GPU checks: runs scripts/gpu-check.sh where an NVIDIA GPU answers,
# and reports itself skipped (exit 77) where none does, as in CI.
set -u
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: no NVIDIA GPU here. The CUDA backend is checked on a GPU machine with"
  echo "scripts/build-gpu.sh (here) and scripts/gpu-check.sh BUILD OUT (there); results in bench/."
  exit 77
fi
out=$(mktemp -d)
exec "$(dirname "$0")/../scripts/gpu-check.sh" "$1" "$out"
