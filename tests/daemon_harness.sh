# Sourced by the shell tests that start a gllmd: check (counts passes and failures), a
# temporary directory with the socket path, and the cleanup that stops the gllmd in $pid.
# shellcheck shell=bash
fail=0 passed=0
check() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; fail=$((fail + 1)); fi; }

tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"; rm -rf "$tmp"; }
trap cleanup EXIT
sock=$tmp/gllmd.sock
