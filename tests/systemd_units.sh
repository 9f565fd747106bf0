#!/usr/bin/env bash
# The systemd units verify, their exposure stays low, and --check-config accepts good
# files and names the line of bad ones. Usage: systemd_units.sh UNIT_DIR GLLMD SRC_SYSTEMD
set -u
units=$1 gllmd=$2 src=$3
fail=0 passed=0
check() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; fail=$((fail + 1)); fi; }

if ! command -v systemd-analyze >/dev/null; then
  echo "SKIPPED: systemd-analyze not installed (package systemd)"; exit 77
fi
out=$(systemd-analyze verify "$units/gllmd.service" "$units/gllmd.socket" 2>&1)
check [ -z "$out" ]
[ -n "$out" ] && echo "$out"
# The metrics timer and its service: every 15 s, into node_exporter's textfile directory.
out=$(systemd-analyze verify "$units/gllmd-metrics.service" "$units/gllmd-metrics.timer" 2>&1)
check [ -z "$out" ]
[ -n "$out" ] && echo "$out"
check grep -q '^OnUnitActiveSec=15s$' "$units/gllmd-metrics.timer"
check grep -q ' metrics --textfile /var/lib/prometheus/node-exporter/gllm.prom$' "$units/gllmd-metrics.service"
metrics_exposure=$(systemd-analyze security --offline=yes --no-pager "$units/gllmd-metrics.service" 2>/dev/null |
                   sed -n 's/.*Overall exposure level for gllmd-metrics.service: \([0-9.]*\).*/\1/p')
echo "metrics exposure: ${metrics_exposure:-?}"
check awk -v e="${metrics_exposure:-99}" 'BEGIN { exit !(e + 0 <= 2.5) }'
exposure=$(systemd-analyze security --offline=yes --no-pager "$units/gllmd.service" 2>/dev/null |
           sed -n 's/.*Overall exposure level for gllmd.service: \([0-9.]*\).*/\1/p')
echo "exposure: ${exposure:-?} (docs/operations.md records it)"
check awk -v e="${exposure:-99}" 'BEGIN { exit !(e + 0 <= 2.0) }'
check grep -q '^ListenSequentialPacket=/run/gllm/gllmd.sock' "$units/gllmd.socket"
check grep -q '^d /run/gllm ' "$src/gllm.tmpfiles.conf"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's/^# \([a-z_]* = [^#]*[^ #]\) *#.*$/\1/; s/^# \([a-z_]* = .*\)$/\1/' "$src/gllmd.conf.example" |
  grep -v '^allow_' > "$tmp/good.conf"
check "$gllmd" --check-config --config "$tmp/good.conf" >/dev/null
printf 'max_inflight = 3\nfrobnicate = yes\n' > "$tmp/bad.conf"
msg=$("$gllmd" --check-config --config "$tmp/bad.conf" 2>&1); rc=$?
check [ "$rc" = 1 ]
check grep -q 'bad.conf:2: unknown key' <<< "$msg"
printf 'max_inflight = 0\n' > "$tmp/range.conf"
check bash -c "! '$gllmd' --check-config --config '$tmp/range.conf' 2>/dev/null"
printf 'busy_poll = on\n' > "$tmp/poll.conf"
check bash -c "'$gllmd' --check-config --config '$tmp/poll.conf' | grep -q '^busy_poll = on$'"
printf 'busy_poll = sometimes\n' > "$tmp/poll2.conf"
check bash -c "'$gllmd' --check-config --config '$tmp/poll2.conf' 2>&1 | grep -q 'busy_poll wants auto, on or off'"
check bash -c "'$gllmd' --check-config --config '$tmp/poll.conf' | grep -q '^deterministic = off$'"
printf 'deterministic = on\n' > "$tmp/det.conf"
check bash -c "'$gllmd' --check-config --config '$tmp/det.conf' | grep -q '^deterministic = on$'"
printf 'deterministic = mostly\n' > "$tmp/det2.conf"
check bash -c "'$gllmd' --check-config --config '$tmp/det2.conf' 2>&1 | grep -q 'deterministic wants on or off'"
printf 'allow_groups = no-such-group-here\n' > "$tmp/group.conf"
check bash -c "'$gllmd' --check-config --config '$tmp/group.conf' 2>&1 | grep -q \"no group named\""
echo "$passed passed, $fail failed"
[ "$fail" = 0 ]
