#!/usr/bin/env bash
# status and metrics against the jobs' own results on the CPU backend: every successful job's
# kernel_ns is in the kernel histogram (count and sum), status --wide's mean kernel time is
# theirs, the added latency is at least the job's time outside its kernel, device memory's
# total is the host's physical memory, and device resets have a counter.
# Usage: test_status_truth.sh GLLMD GLLMCTL
set -u
gllmd=$1 ctl=$2
# shellcheck source=tests/daemon_harness.sh
. "$(dirname "$0")/daemon_harness.sh"
"$gllmd" --socket "$sock" --backend cpu --threads 2 > "$tmp/gllmd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$ctl" --socket "$sock" status >/dev/null 2>&1 && break; sleep 0.1; done
check "$ctl" --socket "$sock" status >/dev/null

# A float32 .npy of ones, [1, 4, 64, 64], written by hand: no numpy needed.
hdr="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 64, 64), }"
while [ $(( (10 + ${#hdr} + 1) % 64 )) != 0 ]; do hdr+=" "; done
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $(( ${#hdr} + 1 )))\\x00"
  printf '%s\n' "$hdr"; head -c $((4 * 64 * 64 * 4)) /dev/zero | tr '\0' '\1'; } > "$tmp/x.npy"

# Five jobs; each prints its own kernel and job time (ms, to the nanosecond).
jobs=5
: > "$tmp/jobs"
for _ in $(seq $jobs); do
  "$ctl" --socket "$sock" --json attn "$tmp/x.npy" "$tmp/x.npy" "$tmp/x.npy" -o "$tmp/o.npy" \
    >> "$tmp/jobs" || echo "FAIL: attn"
done
check [ "$(wc -l < "$tmp/jobs")" = $jobs ]
field() { grep -o "\"$1\": [0-9.]*" "$tmp/jobs" | awk '{ print $2 }'; }
kernel_sum=$(field kernel_ms | awk '{ s += $1 } END { printf "%.9f", s / 1e3 }')
outside_sum=$(paste <(field job_ms) <(field kernel_ms) | awk '{ s += $1 - $2 } END { printf "%.9f", s / 1e3 }')
check awk -v s="$kernel_sum" 'BEGIN { exit !(s > 0) }'

# Replies may come through the ring before the loop counts the jobs: scrape until they are in.
value() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
for _ in $(seq 100); do
  "$ctl" --socket "$sock" metrics > "$tmp/m.prom"
  [ "$(value "$tmp/m.prom" 'gllm_jobs_total{method="attention",result="ok"}')" = $jobs ] && break
  sleep 0.1
done
check [ "$(value "$tmp/m.prom" 'gllm_jobs_total{method="attention",result="ok"}')" = $jobs ]
check [ "$(value "$tmp/m.prom" gllm_job_kernel_seconds_count)" = $jobs ]
check [ "$(value "$tmp/m.prom" gllm_job_added_seconds_count)" = $jobs ]
# The sums agree to the nanosecond per job (the metric is a sum of doubles).
msum=$(value "$tmp/m.prom" gllm_job_kernel_seconds_sum)
check awk -v a="$msum" -v b="$kernel_sum" -v n=$jobs \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= n * 1e-9 + 1e-12) }'
# Added: from reading the request to the job's end, minus the kernel; at least the job's own
# time outside the kernel.
asum=$(value "$tmp/m.prom" gllm_job_added_seconds_sum)
check awk -v a="$asum" -v b="$outside_sum" -v n=$jobs 'BEGIN { exit !(a + n * 1e-9 >= b) }'

# status --wide: the mean kernel time of those jobs, not "-".
"$ctl" --socket "$sock" status --wide > "$tmp/status" || echo "FAIL: status --wide"
want=$(awk -v s="$kernel_sum" -v n=$jobs 'BEGIN { printf "%.1f us", s / n * 1e6 }')
check grep -q "kernel $want, added by gllmd " "$tmp/status"
check bash -c "! grep -q 'kernel -' '$tmp/status'"
check grep -qx 'device resets: 0' "$tmp/status"
# status --json: the same sums and counts.
"$ctl" --socket "$sock" status --json > "$tmp/status.json"
jk=$(grep -o '"kernel": {"sum": [0-9.]*, "count": [0-9]*}' "$tmp/status.json")
check [ "$(grep -o '[0-9]*}$' <<< "$jk" | tr -d '}')" = $jobs ]
check awk -v a="$(awk '{ print $3 }' <<< "$jk" | tr -d ,)" -v b="$kernel_sum" -v n=$jobs \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= n * 1e-9 + 1e-9) }'
check grep -q '"device_resets": 0' "$tmp/status.json"

# Paged jobs (append, decode) are timed too: every successful job has a kernel time.
"$ctl" --socket "$sock" bench --decode --iters 2 > /dev/null || echo "FAIL: bench --decode"
for _ in $(seq 100); do
  "$ctl" --socket "$sock" metrics > "$tmp/m.prom"
  ok=$(awk '/^gllm_jobs_total\{.*result="ok"\}/ { s += $2 } END { print s + 0 }' "$tmp/m.prom")
  [ "$(value "$tmp/m.prom" gllm_jobs_in_flight)" = 0 ] &&
    [ "$ok" = "$(value "$tmp/m.prom" gllm_job_added_seconds_count)" ] && break
  sleep 0.1
done
check [ "$ok" -gt $jobs ]
check [ "$(value "$tmp/m.prom" gllm_job_kernel_seconds_count)" = "$ok" ]

# Device memory: the HELP says what the CPU backend reports, and the total is the host's RAM.
check grep -q "^# HELP gllm_device_memory_total_bytes .*physical memory" "$tmp/m.prom"
ram=$(awk '/^MemTotal:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
check [ "$(value "$tmp/m.prom" 'gllm_device_memory_total_bytes{device="0"}')" = "$ram" ]
check grep -q '^# TYPE gllm_device_resets_total counter$' "$tmp/m.prom"
check [ "$(value "$tmp/m.prom" gllm_device_resets_total)" = 0 ]
check bash -c "'$ctl' --socket '$sock' --json metrics | grep -q '\"device_resets\": 0'"

echo "$passed passed, $fail failed"
[ "$fail" = 0 ]
