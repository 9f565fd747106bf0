#!/usr/bin/env bash
# Every GPU check in one call, for the GPU machine: the test suite against the CUDA backend,
# outputs against PyTorch SDPA in float64, speed against SDPA's FA2 and cuDNN backends, and
# gllmctl bench. Usage: tests/gpu/gpu-check.sh BUILD_DIR OUT_DIR   (BUILD_DIR from
# tests/gpu/build-gpu.sh). Full logs go to OUT_DIR; a short summary is printed last.
# GPU_CHECK_SWEEP=1 adds FlashAttention-3's sweep and the prefill targets' verdict.
set -uo pipefail
build=$(cd "${1:?build dir}" && pwd)
out=${2:?out dir}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GLLMD_PATH="$build/gllmd" GLLM_TEST_BACKEND=cuda PYTHONUNBUFFERED=1
# fault_gpu's gllmd-fault: the one beside this gllmd (its compiled-in path is the build
# machine's, absent where the build was carried to).
export GLLMD_FAULT_PATH="${GLLMD_FAULT_PATH:-$build/gllmd-fault}"
summary=()
note() { summary+=("$*"); echo "== $*"; }

{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
  "$build/gllmd" --version; } 2>&1 | tee "$out/env.txt"
if ldd "$build/gllmd" | grep -qiE 'cuda|cudart'; then note "FAIL gllmd links a CUDA library"; fi

fails=0
for t in test_proto test_arena test_job test_backend_share test_fatbin test_cpu_attention test_backend_ops test_integration test_paged test_lifecycle test_abuse shared_gpu ordering_gpu fault_gpu; do
  if "$build/tests/$t" > "$out/$t.log" 2>&1; then note "ok   $t (backend cuda)"
  else note "FAIL $t (see $t.log)"; tail -30 "$out/$t.log"; fails=$((fails + 1)); fi
done
if python3 "$here/../attn_numpy.py" --gllmd "$build/gllmd" --gllmctl "$build/gllmctl" \
     > "$out/attn_numpy.log" 2>&1; then note "ok   gllmctl attn vs NumPy float64 (cuda)"
else note "FAIL gllmctl attn vs NumPy (see attn_numpy.log)"; tail -20 "$out/attn_numpy.log"; fails=$((fails + 1)); fi

# The dense D = 128 kernel's two walks (whole units, then split parts) with warpgroup 1 late for
# the first walk's final turn: without walk_sync the block hangs (v34 did, now and then).
if [ ! -x "$build/hp_walk_race" ]; then note "skip walk race: no hp_walk_race (built where nvcc is)"
elif ! nvidia-smi --query-gpu=compute_cap --format=csv,noheader | grep -q '^9\.0'; then
  note "skip walk race: not sm_90"
else
  race=ok
  for sh in "4 16 4096" "2 16 8192" "1 32 8192"; do
    timeout 60 "$build/hp_walk_race" 128 $sh 0 "$out/walk_race.bin" >> "$out/walk_race.log" 2>&1 || race="FAIL"
  done
  if [ "$race" = ok ]; then note "ok   walk race (D128 split, warpgroup 1 held 50 us)"
  else note "FAIL walk race (see walk_race.log; 124: hung)"; fails=$((fails + 1)); fi
fi

sock=$(mktemp -d)/gllmd.sock
"$build/gllmd" --socket "$sock" --backend cuda 2> "$out/gllmd.log" &
pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
if [ -z "${GPU_CHECK_PAGED_ONLY:-}" ]; then
  python3 "$here/gpu_compare.py" --socket "$sock" --out "$out" ${GPU_CHECK_ARGS:-} 2>&1 | tee "$out/gpu_compare.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { note "FAIL gpu_compare (see gpu_compare.log)"; fails=$((fails + 1)); }
fi
python3 "$here/gpu_paged.py" --socket "$sock" --out "$out" ${GPU_PAGED_ARGS:-} 2>&1 | tee "$out/gpu_paged.log"
[ "${PIPESTATUS[0]}" = 0 ] || { note "FAIL gpu_paged (see gpu_paged.log)"; fails=$((fails + 1)); }
# The attention variants in dense prefill: float64 checks (a failure fails the check), then
# speed against FlexAttention and cuDNN causal (figures only: dense_variants.json).
if [ -z "${GPU_CHECK_PAGED_ONLY:-}" ]; then
  python3 "$here/dense_variants.py" --socket "$sock" --out "$out" ${DENSE_VARIANTS_ARGS:-} 2>&1 | tee "$out/dense_variants.log"
  if [ "${PIPESTATUS[0]}" = 0 ]; then note "ok   dense variants: $(grep '^correctness' "$out/dense_variants.log")"
  else note "FAIL dense variants: $(grep '^correctness' "$out/dense_variants.log" || tail -1 "$out/dense_variants.log") (see dense_variants.log)"; fails=$((fails + 1)); fi
  # Dv below Dqk (DeepSeek's 192 / 128): float64 checks, then speed against cuDNN.
  if GLLM_LIBRARY="$build/libgllm-client.so" python3 "$here/dv_prefill.py" --socket "$sock" \
       --out "$out" > "$out/dv_prefill.log" 2>&1
  then note "ok   Dqk 192 / Dv 128 prefill: $(grep '^correctness' "$out/dv_prefill.log")"
  else note "FAIL Dqk 192 / Dv 128 prefill (see dv_prefill.log)"; fails=$((fails + 1)); fi
  # Chunked prefill with variants over the paged cache (the Hopper paged prefill's variant
  # form) against float64, timed against plain chunked prefill and the dense variant kernel.
  if python3 "$here/paged_prefill_variants.py" --socket "$sock" --out "$out" \
       > "$out/paged_prefill_variants.log" 2>&1
  then note "ok   paged prefill variants: $(grep '^correctness' "$out/paged_prefill_variants.log")"
  else note "FAIL paged prefill variants (see paged_prefill_variants.log)"; fails=$((fails + 1)); fi
  # Real models: transformers' own modelling code of seven families routed to this gllmd
  # (gllm.integrations.transformers) against its float32 and bf16 paths (hf_models.json).
  if python3 -c "import transformers" 2> /dev/null; then
    if GLLM_LIBRARY="$build/libgllm-client.so" python3 "$here/hf_models.py" --socket "$sock" \
         --out "$out" > "$out/hf_models.log" 2>&1
    then note "ok   real models: $(grep '^models' "$out/hf_models.log")"
    else note "FAIL real models: $(grep '^models' "$out/hf_models.log" || tail -1 "$out/hf_models.log") (see hf_models.log)"; fails=$((fails + 1)); fi
  else note "SKIP real models: no transformers here"; fi
fi
# GPU_CHECK_SWEEP=1: FlashAttention-3's sweep as well (about two minutes), then issue 19's
# prefill targets judged from it and the results above (prefill_targets.py). A target missed
# is a figure, not a defect: it is reported, and fails the check only when the results could
# not be judged.
if [ -n "${GPU_CHECK_SWEEP:-}" ] && [ -z "${GPU_CHECK_PAGED_ONLY:-}" ]; then
  if python3 "$here/gpu_compare.py" --socket "$sock" --out "$out/sweep" --sweep --no-cases \
       --iters 10 > "$out/sweep.log" 2>&1; then note "ok   sweep: $(grep 'sweep correctness' "$out/sweep.log")"
  else note "FAIL sweep (see sweep.log)"; fails=$((fails + 1)); fi
  python3 "$here/prefill_targets.py" --sweep "$out/sweep/gpu_compare.json" \
    --bench "$out/gpu_compare.json" --paged "$out/gpu_paged.json" \
    --json "$out/prefill_targets.json" > "$out/prefill_targets.txt" 2>&1
  case $? in
    0) note "ok   prefill targets: every one met (prefill_targets.txt)" ;;
    1) note "info prefill targets: $(grep -c 'NOT MET' "$out/prefill_targets.txt") not met (prefill_targets.txt)" ;;
    *) note "FAIL prefill targets: $(tail -1 "$out/prefill_targets.txt")"; fails=$((fails + 1)) ;;
  esac
fi
"$build/gllmctl" --socket "$sock" status > "$out/status.txt" 2>&1
"$build/gllmctl" --socket "$sock" bench --wide --iters 20 > "$out/gllmctl_bench.txt" 2>&1
"$build/gllmctl" --socket "$sock" bench --decode --wide --iters 200 > "$out/gllmctl_bench_decode.txt" 2>&1
if [ -n "${GPU_CHECK_PAGED_ONLY:-}" ]; then :
elif "$build/gllm_loadtest" --socket "$sock" --clients 64 --jobs 2000 --depth 8 > "$out/loadtest.txt" 2>&1
then note "ok   load test: $(cat "$out/loadtest.txt")"
else note "FAIL load test: $(tail -3 "$out/loadtest.txt")"; fails=$((fails + 1)); fi
python3 "$here/gpu_paged.py" --socket "$sock" --repeat-only 50 > "$out/repeat-default.log" 2>&1
note "info $(grep -E '^  (ok|FAIL)' "$out/repeat-default.log" | sed 's/^  ok   //')"
# A 24 GiB arena registers without costing its device a reset (it once passed the 10 s
# control bound: docs/hardening.md) and a job runs after it.
if [ -n "${GPU_CHECK_PAGED_ONLY:-}" ]; then :
elif [ "$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)" -lt 48 ]; then
  note "skip big arena: under 48 GiB of memory available"
elif timeout 150 python3 "$here/big_arena.py" --socket "$sock" --gib 24 > "$out/big_arena.log" 2>&1
then note "$(cat "$out/big_arena.log")"
else note "FAIL big arena: $(tail -3 "$out/big_arena.log")"; fails=$((fails + 1)); fi
kill -TERM "$pid"; wait "$pid"; note "gllmd exit status after SIGTERM: $?"

# gllmd with deterministic = on: the same long decode must come back the same every time.
dconf=$(mktemp); echo "deterministic = on" > "$dconf"
dsock=$(mktemp -d)/gllmd.sock
"$build/gllmd" --config "$dconf" --socket "$dsock" --backend cuda 2> "$out/gllmd-deterministic.log" &
dpid=$!
for _ in $(seq 200); do [ -S "$dsock" ] && break; sleep 0.05; done
if python3 "$here/gpu_paged.py" --socket "$dsock" --repeat-only 50 --expect-repeatable > "$out/repeat.log" 2>&1
then note "ok   $(grep -E '^  ok' "$out/repeat.log" | sed 's/^  ok   //')"
else note "FAIL deterministic = on: $(tail -1 "$out/repeat.log")"; fails=$((fails + 1)); fi
# ... and so must a dense prefill whose last units are split between blocks (D = 128 not
# causal: 136 units of 32 key tiles, more than any GPU here has SMs), their parts merged in
# one order whichever block finishes last.
pdir=$(mktemp -d)
python3 -c "
import numpy as np
g = np.random.default_rng(7)
for name, s in (('q', 1024), ('k', 4096), ('v', 4096)):
    np.save('$pdir/' + name + '.npy', g.standard_normal((1, 17, s, 128)).astype(np.float16))"
runs=0
for i in $(seq 20); do
  "$build/gllmctl" --socket "$dsock" attn "$pdir/q.npy" "$pdir/k.npy" "$pdir/v.npy" \
    -o "$pdir/o$i.npy" > "$out/repeat-prefill.log" 2>&1 || break
  runs=$i
done
distinct=$(md5sum "$pdir"/o*.npy 2> /dev/null | cut -d' ' -f1 | sort -u | wc -l)
if [ "$runs" = 20 ] && [ "$distinct" = 1 ]
then note "ok   B1 H17 S1024 Skv4096 D128 prefill (split) run 20 times: 1 different output (gllmd deterministic = on)"
else note "FAIL deterministic = on, split prefill: $runs runs, $distinct different outputs ($(tail -1 "$out/repeat-prefill.log"))"; fails=$((fails + 1)); fi
rm -rf "$pdir"
kill -TERM "$dpid"; wait "$dpid"

echo; echo "== summary"; cat "$out/status.txt"; cat "$out/gllmctl_bench.txt" "$out/gllmctl_bench_decode.txt"
printf '%s\n' "${summary[@]}"
grep -A10 '^shape' "$out/gpu_compare.log" 2>/dev/null || true
grep -A4 '^decode shape' "$out/gpu_paged.log" || true
grep -A12 '^variant shape' "$out/dense_variants.log" 2>/dev/null || true
exit "$fails"
