# Shell helpers for the package tests: the README's example, a gllmd to run it against.
# shellcheck shell=bash
# Sourced, not run.

# The first C block of README.md's "Using the library" section, into $2.
readme_example() {
  awk '/^## Using the library/ { sec = 1 }
       sec && /^```c$/ { on = 1; next }
       on && /^```$/ { exit }
       on { print }' "$1" > "$2"
  grep -q 'int main' "$2" || { echo "FAIL: no complete example program in $1"; return 1; }
}

# Starts gllmd ($1) on the CPU with its socket at $2; waits up to 10 s for the socket.
# Sets GLLMD_PID.
start_gllmd() {
  "$1" --socket "$2" --backend cpu --threads 2 --config /dev/null >"$2.log" 2>&1 &
  GLLMD_PID=$!
  for _ in $(seq 100); do
    [ -S "$2" ] && return 0
    kill -0 "$GLLMD_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: gllmd did not come up:"; cat "$2.log"; return 1
}

stop_gllmd() {
  [ -n "${GLLMD_PID:-}" ] || return 0
  kill "$GLLMD_PID" 2>/dev/null && wait "$GLLMD_PID" 2>/dev/null
  GLLMD_PID=
}

# Runs an example program ($1) against the socket $2 and checks what it printed.
run_example() {
  local out
  out=$(GLLM_SOCKET=$2 "$1" 2>&1) || { echo "FAIL: $1: $out"; return 1; }
  grep -q "^libgllm-client $3\$" <<< "$out" || { echo "FAIL: $1: version: $out"; return 1; }
  grep -q '^out\[0\] = 1 on cpu' <<< "$out" || { echo "FAIL: $1: result: $out"; return 1; }
  echo "$1: $(tr '\n' ' ' <<< "$out")"
}
