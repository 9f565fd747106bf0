#!/usr/bin/env bash
# gllmctl metrics against a real gllmd: the exposition parses (every sample's family has HELP
# and TYPE, names are legal, histograms are cumulative and end in +Inf equal to _count),
# counters move across a job, and --textfile writes the same atomically.
# Usage: test_metrics.sh GLLMD GLLMCTL
set -u
gllmd=$1 gllmctl=$2
# shellcheck source=tests/daemon_harness.sh
. "$(dirname "$0")/daemon_harness.sh"

# Not running yet: gllm_up 0 still comes out, and the exit status says why (3).
down=$("$gllmctl" --socket "$sock" metrics 2>/dev/null); rc=$?
check [ "$rc" = 3 ]
check grep -qx 'gllm_up 0' <<< "$down"

"$gllmd" --socket "$sock" --backend cpu --threads 2 > "$tmp/gllmd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$gllmctl" --socket "$sock" status >/dev/null 2>&1 && break; sleep 0.1; done
check "$gllmctl" --socket "$sock" status >/dev/null

# A float32 .npy of zeros, [1, 2, 16, D], written by hand: no numpy needed. Usage: npy PATH D
npy() {
  local hdr="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 16, $2), }"
  while [ $(( (10 + ${#hdr} + 1) % 64 )) != 0 ]; do hdr+=" "; done
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $(( (${#hdr} + 1) % 256 )))\\x$(printf %02x $(( (${#hdr} + 1) / 256 )))";
    printf '%s\n' "$hdr"; head -c $((2 * 16 * $2 * 4)) /dev/zero; } > "$1"
}
for t in q k v; do npy "$tmp/$t.npy" 64; done
npy "$tmp/k32.npy" 32

# Checks one scrape; prints "value" of the sample named by $2 (with its labels) for the caller.
validate() {
  awk '
    function fail(msg) { print "FAIL: " msg ": " $0; bad = 1 }
    /^# HELP / { help[$3] = 1; next }
    /^# TYPE / { type[$3] = $4; if ($4 !~ /^(counter|gauge|histogram|summary|untyped)$/) fail("type"); next }
    /^#/ { next }
    /^$/ { fail("empty line"); next }
    {
      name = $1; sub(/\{.*/, "", name)
      if (name !~ /^[a-zA-Z_:][a-zA-Z0-9_:]*$/) fail("metric name")
      fam = name
      if (!(fam in type)) { fam = name; sub(/_(bucket|sum|count)$/, "", fam) }
      if (!(fam in type) || !(fam in help)) fail("sample without HELP and TYPE")
      if (type[fam] == "counter" && name !~ /_total$/) fail("counter not named _total")
      if ($2 !~ /^([-+]?[0-9.]+([eE][-+]?[0-9]+)?|[-+]Inf|NaN)$/) fail("value")
      if (type[fam] == "histogram") {
        if (name ~ /_bucket$/) {
          le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le)
          if (fam in last && $2 + 0 < last[fam]) fail("bucket not cumulative")
          if (fam in lastle && le != "+Inf" && le + 0 <= lastle[fam]) fail("bounds not ascending")
          last[fam] = $2 + 0; lastle[fam] = le + 0
          if (le == "+Inf") inf[fam] = $2 + 0
        } else if (name ~ /_count$/) {
          if (!(fam in inf)) fail("_count before the +Inf bucket")
          else if (inf[fam] != $2 + 0) fail("+Inf bucket differs from _count")
          ncount[fam]++
        }
      }
      samples++
    }
    END {
      for (f in type) if (type[f] == "histogram" && !(f in ncount)) { print "FAIL: histogram " f " without _count"; bad = 1 }
      if (samples < 20) { print "FAIL: only " samples " samples"; bad = 1 }
      exit bad
    }' "$1"
}
value() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

"$gllmctl" --socket "$sock" metrics > "$tmp/before.prom"
check validate "$tmp/before.prom"
for family in gllm_up gllm_info gllm_jobs_total gllm_job_queue_seconds gllm_job_kernel_seconds \
              gllm_job_added_seconds gllm_clients gllm_jobs_in_flight gllm_arena_mapped_bytes \
              gllm_arenas gllm_device_tensors gllm_device_tensor_bytes \
              gllm_device_memory_used_bytes gllm_device_memory_total_bytes gllm_requests_total \
              gllm_ring_requests_total gllm_error_replies_total gllm_limit_violations_total; do
  check grep -q "^# TYPE $family " "$tmp/before.prom"
done
check grep -qx 'gllm_up 1' "$tmp/before.prom"
check grep -q '^gllm_info{version="[0-9.]*",backend="cpu"} 1$' "$tmp/before.prom"
check grep -q '^gllm_device_memory_used_bytes{device="0"} ' "$tmp/before.prom"

for _ in 1 2 3; do
  check "$gllmctl" --socket "$sock" attn "$tmp/q.npy" "$tmp/k.npy" "$tmp/v.npy" -o "$tmp/o.npy" 2>/dev/null
done
# A reply can come through the shared-memory ring before gllmd's loop counts the job: scrape
# until the count is in, for at most 10 s.
ok='gllm_jobs_total{method="attention",result="ok"}'
b=$(value "$tmp/before.prom" "$ok")
for _ in $(seq 100); do
  check_rc=0
  "$gllmctl" --socket "$sock" metrics --textfile "$tmp/gllm.prom" || check_rc=$?
  a=$(value "$tmp/gllm.prom" "$ok")
  [ "$check_rc" = 0 ] && [ "$((a - b))" -ge 3 ] && break
  sleep 0.1
done
check [ "$check_rc" = 0 ]
check validate "$tmp/gllm.prom"
after=$tmp/gllm.prom
check [ "$((a - b))" = 3 ]
b=$(value "$tmp/before.prom" gllm_job_added_seconds_count) a=$(value "$after" gllm_job_added_seconds_count)
check [ "$((a - b))" = 3 ]
b=$(value "$tmp/before.prom" gllm_requests_total) a=$(value "$after" gllm_requests_total)
check [ "$a" -gt "$b" ]
check awk -v s="$(value "$after" gllm_job_added_seconds_sum)" 'BEGIN { exit !(s > 0) }'
# A refused job (K's head dimension differs from Q's) counts as an error reply.
b=$(value "$after" gllm_error_replies_total)
check bash -c "! '$gllmctl' --socket '$sock' attn '$tmp/q.npy' '$tmp/k32.npy' '$tmp/v.npy' -o '$tmp/o.npy' 2>/dev/null"
"$gllmctl" --socket "$sock" metrics > "$tmp/third.prom"
check validate "$tmp/third.prom"
a=$(value "$tmp/third.prom" gllm_error_replies_total)
check [ "$a" -gt "$b" ]

# --textfile: no temporary file left behind, readable by others, replaced in place.
check [ "$(find "$tmp" -name '.gllm.prom.*' | wc -l)" = 0 ]
check [ "$(stat -c %a "$after")" = 644 ]
check bash -c "! '$gllmctl' --socket '$sock' metrics --textfile 2>/dev/null"
check bash -c "! '$gllmctl' --socket '$sock' metrics --textfile '$tmp/no/such/dir/x.prom' 2>/dev/null"
# JSON carries the schema version.
check bash -c "'$gllmctl' --socket '$sock' --json metrics | grep -q '^{\"schema_version\": 1, \"up\": true'"

echo "$passed passed, $fail failed"
[ "$fail" = 0 ]
