#!/usr/bin/env bash
# The benchmark pipeline in one go on a GPU machine: ROUNDS rounds of the benchmarks against one
# gllmd (gpu_compare.py: prefill against FA2 and cuDNN; gpu_paged.py: paged decode against
# them; gllmctl bench and bench --decode), each writing gllm-bench-run/1 (bench/SCHEMA.md);
# the rounds merged; compared with the baseline of this GPU (bench/baselines/h100.json or
# h200.json, from nvidia-smi's name); plotted. Then SLOW_ROUNDS rounds with
# GLLM_BENCH_SLOWDOWN set (the harness's test hook: gllmd is the same process, untouched),
# compared with the baseline and with the unchanged rounds of this call: the gate must catch it.
#
# Usage: bench/ci-run.sh BUILD OUT    (BUILD from tests/gpu/build-gpu.sh; built there if absent)
# Environment: ROUNDS (3), SLOW_ROUNDS (2; 0 skips the slowdown, as CI does), SLOWDOWN (0.1),
# BUDGET_S (420: fewer rounds when the first shows they would not fit; at least 2 and 1),
# BASELINE (a file; default from the GPU's name), THRESHOLD (0.03), GLLM_COMMIT; to rehearse
# the script without a GPU: CI_BACKEND=cpu (gllmctl only: the PyTorch scripts need CUDA),
# CTL_ITERS (20) and DECODE_ITERS (1000); PYTHON (python3) runs the Python parts.
# Exit status: 0 the gate passed (and caught the slowdown), 1 a regression against the
# baseline, 2 a benchmark or a comparison could not run, 3 the slowdown was not caught.
# A summary is printed last; everything else is under OUT.
set -uo pipefail
build=${1:?usage: bench/ci-run.sh BUILD OUT}
out=${2:?usage: bench/ci-run.sh BUILD OUT}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src" || exit 2
rounds=${ROUNDS:-3} slow_rounds=${SLOW_ROUNDS:-2} slowdown=${SLOWDOWN:-0.1}
threshold=${THRESHOLD:-0.03} backend=${CI_BACKEND:-cuda}
ctl_iters=${CTL_ITERS:-20} decode_iters=${DECODE_ITERS:-1000}
py=${PYTHON:-python3}
start=$(date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=()
note() { summary+=("$*"); echo "== $*"; }
unset GLLM_BENCH_SLOWDOWN
export GLLM_COMMIT=${GLLM_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export PYTHONUNBUFFERED=1

if [ ! -x "$build/gllmd" ] || [ ! -x "$build/gllmctl" ]; then
  echo "== building $build"
  tests/gpu/build-gpu.sh "$build" > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 2; }
fi
build=$(cd "$build" && pwd)
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu" in
  *H100*) base_default=bench/baselines/h100.json ;;
  *H200*) base_default=bench/baselines/h200.json ;;
  *) base_default= ;;
esac
baseline=${BASELINE:-$base_default}
{ date -u; echo "gpu: ${gpu:-none}"; echo "baseline: ${baseline:-none}"; echo "commit: $GLLM_COMMIT"
  nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
  "$build/gllmd" --version; } | tee "$out/env.txt"

sock=$(mktemp -d)/gllmd.sock
"$build/gllmd" --socket "$sock" --backend "$backend" 2> "$out/gllmd.log" &
pid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { note "FAIL gllmd did not start (gllmd.log)"; tail -20 "$out/gllmd.log"; exit 2; }
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null' EXIT

bench_failed=0
# One round of every benchmark into $1; with $2 set, under the slowdown hook.
round() {
  local dir=$1 slow=${2:-} t0
  t0=$(date +%s)
  mkdir -p "$dir"
  (
    [ -n "$slow" ] && export GLLM_BENCH_SLOWDOWN=$slow
    if [ "$backend" = cuda ]; then
      $py tests/gpu/gpu_compare.py --socket "$sock" --out "$dir" --skip-check --iters 20 > "$dir/gpu_compare.log" 2>&1 \
        || echo "gpu_compare.py failed" >> "$dir/failed"
      $py tests/gpu/gpu_paged.py --socket "$sock" --out "$dir" --skip-check --iters 100 > "$dir/gpu_paged.log" 2>&1 \
        || echo "gpu_paged.py failed" >> "$dir/failed"
    fi
    "$build/gllmctl" --socket "$sock" bench --json --iters "$ctl_iters" > "$dir/ctl_prefill.json" 2> "$dir/ctl_prefill.log" \
      || echo "gllmctl bench failed" >> "$dir/failed"
    "$build/gllmctl" --socket "$sock" bench --decode --json --iters "$decode_iters" > "$dir/ctl_decode.json" 2> "$dir/ctl_decode.log" \
      || echo "gllmctl bench --decode failed" >> "$dir/failed"
  )
  if [ -s "$dir/failed" ]; then
    note "FAIL $(basename "$dir"): $(tr '\n' ';' < "$dir/failed") (logs in $dir)"
    bench_failed=1
  else
    echo "== $(basename "$dir") done in $(( $(date +%s) - t0 )) s"
  fi
}
# The JSON files of the rounds matching a pattern, merged into one run.
merge() {
  local to=$1; shift
  # shellcheck disable=SC2046 # one word per file
  $py bench/benchrun.py merge "$to" $(ls "$@" 2>/dev/null) || { note "FAIL merging into $to"; bench_failed=1; }
}

# Fits the rounds to BUDGET_S (default 420 s, for a device call of under 8 minutes): after
# the first round, fewer rounds (never fewer than 2 unchanged and 1 slowed) when all of
# them would not fit.
t1=$(date +%s)
round "$out/rounds/r1"
per=$(( $(date +%s) - t1 + 1 ))
budget=${BUDGET_S:-420}
while [ $(( t1 - start + per * (rounds + slow_rounds) + 20 )) -gt "$budget" ]; do
  if [ "$slow_rounds" -gt 1 ]; then slow_rounds=$((slow_rounds - 1))
  elif [ "$rounds" -gt 2 ]; then rounds=$((rounds - 1))
  else break; fi
done
if [ "$rounds" != "${ROUNDS:-3}" ] || [ "$slow_rounds" != "${SLOW_ROUNDS:-2}" ]; then
  note "budget ${budget} s, ~${per} s a round: $rounds rounds, $slow_rounds slowed"
fi
for r in $(seq 2 "$rounds"); do round "$out/rounds/r$r"; done
merge "$out/current.json" "$out"/rounds/r*/*.json
slow_rc=
if [ "$slow_rounds" -gt 0 ]; then
  for r in $(seq "$slow_rounds"); do round "$out/rounds-slow/r$r" "$slowdown"; done
  merge "$out/slowed.json" "$out"/rounds-slow/r*/*.json
fi
kill -TERM "$pid"; wait "$pid"; note "gllmd exit status after SIGTERM: $?"
trap - EXIT
[ "$bench_failed" = 0 ] || { printf '%s\n' "${summary[@]}"; exit 2; }

cmp() {   # NAME BASE CURRENT: the gate's table and JSON under OUT; its exit status
  $py bench/compare.py --threshold "$threshold" --out "$out/compare-$1.json" "$2" "$3" > "$out/compare-$1.txt" 2>&1
}
base_rc=skipped
if [ -n "$baseline" ]; then
  cmp baseline "$baseline" "$out/current.json"; base_rc=$?
  note "current vs $baseline: exit $base_rc ($(grep -c '^REGRESSION' "$out/compare-baseline.txt") regressions; compare-baseline.txt)"
  $py bench/plot.py --out "$out/plots" --threshold "$threshold" --baseline "$baseline" -- "$out/current.json" > /dev/null \
    || note "FAIL plot.py (current)"
else
  note "no baseline for '${gpu:-no GPU}': comparison skipped"
  $py bench/plot.py --out "$out/plots" "$out/current.json" > /dev/null || note "FAIL plot.py (current)"
fi
if [ "$slow_rounds" -gt 0 ]; then
  cmp slowed-vs-current "$out/current.json" "$out/slowed.json"; slow_rc=$?
  note "slowed by $slowdown vs this call's unchanged rounds: exit $slow_rc ($(grep -c '^REGRESSION' "$out/compare-slowed-vs-current.txt") regressions)"
  if [ -n "$baseline" ]; then
    cmp slowed-vs-baseline "$baseline" "$out/slowed.json"
    note "slowed by $slowdown vs $baseline: exit $? ($(grep -c '^REGRESSION' "$out/compare-slowed-vs-baseline.txt") regressions)"
  fi
  $py bench/plot.py --out "$out/plots-slowed" --threshold "$threshold" --baseline "$out/current.json" -- "$out/slowed.json" > /dev/null \
    || note "FAIL plot.py (slowed)"
fi

echo
echo "== comparison with the baseline"
[ -f "$out/compare-baseline.txt" ] && grep -E '^(baseline|current|warning|threshold)|REGRESSION|faster|slower|noise|^[0-9]+ regression|missing' "$out/compare-baseline.txt"
if [ -n "$slow_rc" ]; then
  echo "== the slowed rounds against the unchanged ones"
  grep -E '^[0-9]+ regression|^REGRESSION' "$out/compare-slowed-vs-current.txt"
fi
echo
echo "== summary ($(( $(date +%s) - start )) s; ${gpu:-no GPU}; $rounds rounds${slow_rc:+, $slow_rounds slowed by $slowdown}; results in $out)"
printf '%s\n' "${summary[@]}"
rc=0
case "$base_rc" in 0|skipped) ;; 1) rc=1 ;; *) rc=2 ;; esac
if [ -n "$slow_rc" ] && [ "$slow_rc" != 1 ]; then
  echo "the gate did NOT catch the slowdown (exit $slow_rc)"; [ "$rc" = 0 ] && rc=3
elif [ -n "$slow_rc" ]; then
  echo "the gate caught the slowdown"
fi
echo "ci-run exit status $rc"
exit "$rc"
