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
du -sh "$build"
