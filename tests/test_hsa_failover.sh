#!/bin/sh
# gllmd on a machine without an AMD GPU (CI): --backend hsa refuses to start with a one-line
# reason naming what is missing, and auto passes over hsa, says why, and serves.
# Usage: test_hsa_failover.sh GLLMD
set -u
gllmd=${1:?gllmd}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -e /dev/kfd ]; then
    echo "SKIPPED: /dev/kfd exists here (an AMD GPU may be present)"
    exit 77
fi
timeout 30 "$gllmd" --backend hsa --socket "$tmp/h.sock" > "$tmp/hsa.log" 2>&1
rc=$?
cat "$tmp/hsa.log"
if [ "$rc" != 1 ]; then
    echo "FAIL: gllmd --backend hsa exited $rc, not 1"
    exit 1
fi
# The reason: the runtime library is missing, or it is there and /dev/kfd is not.
if ! grep -Eq "backend 'hsa': hsa: (libhsa-runtime64.so.1 not loadable|no /dev/kfd)" "$tmp/hsa.log"; then
    echo "FAIL: no one-line reason for passing over hsa"
    exit 1
fi
"$gllmd" --socket "$tmp/a.sock" > "$tmp/auto.log" 2>&1 &
pid=$!
i=0
while [ ! -S "$tmp/a.sock" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM "$pid"
wait "$pid"
rc=$?
cat "$tmp/auto.log"
if [ "$rc" != 0 ] || ! grep -Eq "backend (cuda|cpu) chosen; passed over .*hsa: " "$tmp/auto.log"; then
    echo "FAIL: auto did not pass over hsa with a reason and serve (exit $rc)"
    exit 1
fi
echo "ok: hsa passed over with a reason, $(grep -o 'backend [a-z]* chosen' "$tmp/auto.log")"
