#!/usr/bin/env bash
# The HSA backend's kernels and failover, checked on the NVIDIA GPU machine (no AMD GPU is
# reachable): the portable kernels compiled for NVIDIA (the cuda-portable backend) through
# the conformance suite (float64 reference), gllmctl attn against NumPy float64, and PyTorch
# float64 comparisons; then gllmd --backend hsa where libhsa-runtime64.so.1 has no AMD GPU.
# Usage: tests/gpu/portable-check.sh BUILD_DIR OUT_DIR   (BUILD_DIR from tests/gpu/build-gpu.sh)
set -uo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GLLMD_PATH="$build/gllmd" PYTHONUNBUFFERED=1
summary=()
fails=0
note() { summary+=("$*"); echo "== $*"; }
check() {  # name, command...: runs it, logs to OUT_DIR/name.log
  local name=$1; shift
  if "$@" > "$out/$name.log" 2>&1; then note "ok   $name"
  else note "FAIL $name (see $name.log)"; tail -30 "$out/$name.log"; fails=$((fails + 1)); fi
}

{ date -u; nvidia-smi -L; "$build/gllmd" --version; } 2>&1 | tee "$out/env.txt"

# 1. The portable kernels on the GPU, against float64 references.
check conformance-cuda-portable env GLLM_TEST_BACKEND=cuda-portable "$build/tests/test_backend_ops"
check attn-numpy-cuda-portable env GLLM_TEST_BACKEND=cuda-portable \
  python3 "$here/../attn_numpy.py" --gllmd "$build/gllmd" --gllmctl "$build/gllmctl"
sock=$(mktemp -d)/gllmd.sock
"$build/gllmd" --socket "$sock" --backend cuda-portable 2> "$out/gllmd-cuda-portable.log" &
pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
check torch-compare-cuda-portable python3 "$here/gpu_compare.py" --socket "$sock" --out "$out" --skip-bench
check torch-paged-cuda-portable python3 "$here/gpu_paged.py" --socket "$sock" --out "$out" --iters 3
kill -TERM "$pid"; wait "$pid"; note "gllmd (cuda-portable) exit status after SIGTERM: $?"

# 2. The same source on the host, and the HSA backend against its fake runtime.
for t in test_pk_emulated test_cuda_portable test_hsa_codeobj test_hsa_backend; do
  [ -x "$build/tests/$t" ] && check "$t" "$build/tests/$t"
done

# 3. HSA where the runtime has no AMD GPU: --backend hsa fails with a one-line reason,
#    auto passes over it (and names why), the next backend serves.
if ldconfig -p | grep -q 'libhsa-runtime64.so.1 '; then note "info libhsa-runtime64.so.1 present"
else note "info libhsa-runtime64.so.1 absent here: the reason will say so"; fi
timeout 60 "$build/gllmd" --backend hsa --socket "$(mktemp -d)/h.sock" > "$out/gllmd-hsa.log" 2>&1
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "backend 'hsa': hsa: " "$out/gllmd-hsa.log"; then
  note "ok   gllmd --backend hsa refuses (exit $rc): $(tail -1 "$out/gllmd-hsa.log")"
else note "FAIL gllmd --backend hsa: exit $rc, $(tail -1 "$out/gllmd-hsa.log")"; fails=$((fails + 1)); fi
asock=$(mktemp -d)/a.sock
timeout 60 "$build/gllmd" --socket "$asock" > "$out/gllmd-auto.log" 2>&1 &
apid=$!
for _ in $(seq 200); do [ -S "$asock" ] && break; sleep 0.05; done
kill -TERM "$apid" 2>/dev/null; wait "$apid"
if grep -q "backend cuda chosen" "$out/gllmd-auto.log" && grep -q "hsa: " "$out/gllmd-auto.log"; then
  note "ok   auto: $(grep -m1 'chosen' "$out/gllmd-auto.log")"
else note "FAIL auto did not choose cuda and name why hsa was passed over (see gllmd-auto.log)"
  fails=$((fails + 1)); fi

printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
exit $((fails > 0))
