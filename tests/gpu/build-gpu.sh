#!/usr/bin/env bash
# Builds what tests/gpu/gpu-check.sh needs on a GPU machine that has no libuv, msgpack-c or
# CMocka: libuv and msgpack-c linked statically, libcmocka copied beside the tests.
# Usage: tests/gpu/build-gpu.sh [BUILD_DIR]   (default build-gpu)
set -euo pipefail
build=${1:-build-gpu}
cmake -S . -B "$build" -DGLLM_STATIC_DEPS=ON -DGLLM_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
mkdir -p "$build/lib"
cp -L "$(ldconfig -p | awk '/libcmocka.so.0 / {print $NF; exit}')" "$build/lib/"
# The walk race (gpu-check.sh): the dense kernel outside gllmd (kernels/tools/hp_trace.cu) with
# warpgroup 1 held 50 us before the first walk's final turn. Needs nvcc; skipped without it.
if command -v nvcc > /dev/null; then
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/cuda -DHP_NO_TRACE \
       -DGLLM_HP_TEST_SLOW_WG1_NS=50000 -o "$build/hp_walk_race" kernels/tools/hp_trace.cu -lcuda
fi
du -sh "$build"
