#!/usr/bin/env bash
# gllmctl's conventions: help on every command, global options before or after the command,
# usage errors exit 2, "not running" 3 and "permission denied" 4 with advice, status fits 80
# columns, colour only on a terminal without NO_COLOR, and a completion that knows every
# command. Usage: test_gllmctl_cli.sh GLLMD GLLMCTL SOURCE_DIR
set -u
gllmd=$1 ctl=$2 src=$3
fail=0 passed=0
check() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; fail=$((fail + 1)); fi; }
# Runs gllmctl; wants exit status $1; keeps stdout in $out and stderr in $err.
expect() {
  local want=$1; shift
  out=$("$ctl" "$@" 2>"$tmp/err"); local rc=$?
  err=$(cat "$tmp/err")
  if [ "$rc" = "$want" ]; then passed=$((passed + 1)); else
    echo "FAIL: gllmctl $* exited $rc, want $want"; echo "$err"; fail=$((fail + 1)); fi
}

tmp=$(mktemp -d)
adm=$(mktemp -d)
pid= pid_inproc= pid_adm=
cleanup() {
  for p in $pid $pid_inproc $pid_adm; do kill "$p" 2>/dev/null && wait "$p"; done
  rm -rf "$tmp" "$adm"
}
trap cleanup EXIT
# Until the gllmd at socket $1 answers status (10 s at most; the checks after it say if not).
up() { for _ in $(seq 100); do "$ctl" --socket "$1" status >/dev/null 2>&1 && return; sleep 0.1; done; }
sock=$tmp/gllmd.sock

# Help: the list, then each command's, by `help CMD`, `CMD --help` and `CMD -h`.
expect 0 help
commands=$(awk '/^Commands:/ { on = 1; next } on && /^$/ { exit } on { print $1 }' <<< "$out")
check [ "$(wc -w <<< "$commands")" -ge 6 ]
for c in $commands; do
  expect 0 help "$c"; check grep -q "^Usage: gllmctl $c" <<< "$out"
  check awk '{ if (length($0) > 80) { print "too wide: " $0; exit 1 } }' <<< "$out"
  expect 0 "$c" --help; check grep -q "^Usage: gllmctl $c" <<< "$out"
  expect 0 "$c" -h; check grep -q "^Usage: gllmctl $c" <<< "$out"
done
expect 0 bench --decode --help
expect 0 --help
check grep -q '^Exit status: ' <<< "$out"
expect 2
expect 2 help no-such-command
expect 2 no-such-command
check grep -q "gllmctl help" <<< "$err"
expect 2 --socket
check grep -q -- '--socket needs a path' <<< "$err"
expect 2 status --socket
expect 2 status --frobnicate
expect 2 --frobnicate status
expect 2 bench --iters abc
expect 2 metrics --textfile
expect 2 version extra
# A near miss gets the command it probably meant; help's own errors suggest no 'help help'.
expect 2 stat
check grep -q "did you mean 'status'" <<< "$err"
expect 2 metrcs
check grep -q "did you mean 'metrics'" <<< "$err"
expect 2 help frob
check bash -c "! grep -q 'help help' <<< \"\$1\"" _ "$err"
expect 2 help stat
check grep -q "did you mean 'status'" <<< "$err"
expect 2 -s
check grep -q -- '-s needs a path' <<< "$err"
expect 2 --format yaml status
check grep -q -- '--format wants text, json or csv' <<< "$err"
expect 2 --format csv attn
expect 2 status --watch 0
expect 2 status --count 3
expect 2 client
expect 2 client frob
expect 2 client jobs
expect 2 client disconnect abc
expect 2 drain --frob
expect 2 reload extra
# One error prefix for every command: "gllmctl: error: ".
expect 2 bench --frob
check grep -q '^gllmctl: error: bench: ' <<< "$err"
expect 2 attn "$tmp/none.npy" "$tmp/none.npy" "$tmp/none.npy" -o "$tmp/o.npy" --scale x
check grep -q '^gllmctl: error: ' <<< "$err"
# --version is gllmctl's own: no daemon asked (so none named, even when one is down).
expect 0 --version --socket "$tmp/none.sock"
check grep -q '^gllmctl [0-9]' <<< "$out"
check grep -q '^libgllm-client [0-9]' <<< "$out"
check bash -c "! grep -q gllmd <<< \"\$1\"" _ "$out"
expect 0 --version --json
check grep -q '^{"schema_version": 1, "gllmctl": ' <<< "$out"

# Not running: exit 3, the paths tried, how to pick another, and the state on stdout.
expect 3 --socket "$tmp/none.sock" status
check grep -q "$tmp/none.sock" <<< "$err"
check grep -q -- '-s PATH' <<< "$err"
check grep -q 'GLLM_SOCKET' <<< "$err"
check grep -qx 'gllmd: not running' <<< "$out"
expect 3 -s "$tmp/none.sock" status --format csv
check grep -q '^time,running,' <<< "$out"
check grep -q '^[0-9T:Z-]*,no,' <<< "$out"
expect 3 -s "$tmp/none.sock" drain
expect 3 -s "$tmp/none.sock" client list
out=$(GLLM_SOCKET=$tmp/env.sock "$ctl" status 2>&1)
check grep -q "$tmp/env.sock (GLLM_SOCKET)" <<< "$out"
expect 3 status --json --socket "$tmp/none.sock"
check grep -q '"schema_version": 1, "running": false' <<< "$out"
expect 0 version --socket "$tmp/none.sock"
check grep -q '^gllmctl [0-9]' <<< "$out"
check grep -q '^libgllm-client [0-9]' <<< "$out"
check grep -q '^gllmd: not reachable' <<< "$out"

"$gllmd" --socket "$sock" --backend cpu --threads 2 > "$tmp/gllmd.log" 2>&1 &
pid=$!
up "$sock"

# Global options before or after the command; -s is --socket.
expect 0 --socket "$sock" status
expect 0 -s "$sock" status
expect 0 status -s "$sock"
expect 0 status --socket "$sock"
expect 0 status --socket="$sock" --wide
expect 0 status --json --socket "$sock"
check grep -q '^{"schema_version": 1, "running": true' <<< "$out"
# The device's own process (device_processes is on by default): a child of this gllmd, named
# in the JSON and at the head of the device's line.
dpid=$(grep -o '"process_pid": [0-9]*' <<< "$out" | head -1 | grep -o '[0-9]*$')
check [ "${dpid:-0}" -gt 0 ]
check [ "$(awk '/^PPid:/ { print $2 }' "/proc/${dpid:-0}/status" 2>/dev/null)" = "$pid" ]
expect 0 status --socket "$sock"
check grep -q "^  device 0 (pid $dpid): " <<< "$out"
expect 0 --json --socket "$sock" version
check grep -q '"gllmd": "[0-9]' <<< "$out"
expect 0 version --socket "$sock"
check grep -q "^gllmd [0-9.]* (protocol [0-9]*, backend cpu)" <<< "$out"

# --format csv: a header and a row; --watch: one report per interval (--count of them).
expect 0 -s "$sock" --format csv status
check [ "$(wc -l <<< "$out")" = 2 ]
check grep -q '^time,running,daemon,backend,uptime_s,clients,' <<< "$out"
check grep -q '^[0-9T:Z-]*,yes,[0-9.]*,cpu,' <<< "$out"
hdr_fields=$(head -1 <<< "$out" | awk -F, '{ print NF }')
check [ "$(tail -1 <<< "$out" | awk -F, '{ print NF }')" = "$hdr_fields" ]
expect 0 -s "$sock" --format csv status --watch 0.2 --count 3
check [ "$(wc -l <<< "$out")" = 4 ]
expect 0 -s "$sock" --json status --watch 0.1 --count 2
check [ "$(grep -c '^{"schema_version": 1, "running": true' <<< "$out")" = 2 ]
expect 0 -s "$sock" status -w 0.1 --count 2
check [ "$(grep -c '^gllmd .*: running' <<< "$out")" = 2 ]
expect 0 -s "$sock" --format csv metrics
check grep -q '^metric,labels,value$' <<< "$out"
check grep -qx 'gllm_up,"",1' <<< "$out"
check grep -q '^gllm_info,"version=""[0-9.]*"",backend=""cpu""",1$' <<< "$out"

# Control verbs (root here is an administrator): the connections, one's jobs, a disconnect,
# a reload. Who may not is checked below, with the permissions.
expect 0 -s "$sock" client list
check grep -q '^ *ID  *PID ' <<< "$out"
check grep -q ' gllmctl  *yes ' <<< "$out"
"$ctl" -s "$sock" --format csv status --watch 0.2 --count 100 > "$tmp/watch.csv" 2>/dev/null &
watcher=$!
for _ in $(seq 50); do [ "$(wc -l < "$tmp/watch.csv")" -ge 2 ] && break; sleep 0.1; done
expect 0 -s "$sock" --json client list
wid=$(grep -o '"id": [0-9]*, "pid": '"$watcher"',' <<< "$out" | grep -o '^"id": [0-9]*' | grep -o '[0-9]*$')
check [ -n "$wid" ]
expect 0 -s "$sock" client jobs "${wid:-0}"
check grep -q "^client ${wid:-0}: pid $watcher, " <<< "$out"
check grep -q '^  attention ' <<< "$out"
expect 0 -s "$sock" --format csv client jobs "${wid:-0}"
check grep -q '^id,method,ok,failed$' <<< "$out"
expect 1 -s "$sock" client jobs 999999
check grep -q 'no client 999999' <<< "$err"
expect 0 -s "$sock" client disconnect "${wid:-0}"
check grep -qx "client ${wid:-0} disconnected" <<< "$out"
expect 0 -s "$sock" --json client list
check bash -c "! grep -q '\"id\": ${wid:-0},' <<< \"\$1\"" _ "$out"
kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
check grep -q ',yes,' "$tmp/watch.csv"
expect 1 -s "$sock" client disconnect 999999
expect 0 -s "$sock" reload
check grep -qx 'gllmd: configuration reloaded' <<< "$out"

# Status fits 80 columns, however long a device's name; --wide may take more.
expect 0 status --socket "$sock"
check awk '{ if (length($0) > 80) { print "too wide: " $0; exit 1 } }' <<< "$out"
check [ "$(wc -l <<< "$out")" -ge 5 ]

# The bench tables fit 80 columns too, decode's included; --wide prints every column.
expect 0 bench --decode --iters 3 --socket "$sock"
check awk '{ if (length($0) > 80) { print "too wide: " $0; exit 1 } }' <<< "$out"
check grep -q "^decode B1 L256" <<< "$out"
expect 0 bench --decode --wide --iters 3 --socket "$sock"
check grep -q "^decode B1 Hq8 Hkv2 L256 D128 f16 page 16 " <<< "$out"

# attn: usage errors are 2; a float64 file names its dtype whole and what is accepted.
npy() {   # PATH DESCR ELEMENT_BYTES: a [1, 2, 16, 64] array of zeros
  local hdr="{'descr': '$2', 'fortran_order': False, 'shape': (1, 2, 16, 64), }"
  while [ $(( (10 + ${#hdr} + 1) % 64 )) != 0 ]; do hdr+=" "; done
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $(( (${#hdr} + 1) % 256 )))\\x00";
    printf '%s\n' "$hdr"; head -c $((2 * 16 * 64 * $3)) /dev/zero; } > "$1"
}
npy "$tmp/q.npy" '<f4' 4
npy "$tmp/d.npy" '<f8' 8
expect 0 attn "$tmp/q.npy" "$tmp/q.npy" "$tmp/q.npy" -o "$tmp/o.npy" --socket "$sock"
expect 0 --json attn "$tmp/q.npy" "$tmp/q.npy" "$tmp/q.npy" -o "$tmp/o.npy" --socket "$sock"
check grep -q '^{"schema_version": 1, "output": ' <<< "$out"
expect 2 attn "$tmp/q.npy" "$tmp/q.npy" "$tmp/q.npy" -o "$tmp/o.npy" --scale abc --socket "$sock"
expect 2 attn "$tmp/q.npy" "$tmp/q.npy" "$tmp/q.npy" -o "$tmp/o.npy" --dtype f64 --socket "$sock"
expect 2 attn "$tmp/q.npy" "$tmp/q.npy" -o "$tmp/o.npy" --socket "$sock"
expect 2 attn "$tmp/q.npy" "$tmp/q.npy" "$tmp/q.npy" -o
expect 1 attn "$tmp/d.npy" "$tmp/q.npy" "$tmp/q.npy" -o "$tmp/o.npy" --socket "$sock"
check grep -q "dtype '<f8' is not supported" <<< "$err"
check grep -q "float32 ('<f4')" <<< "$err"

# Colour: only on a terminal, never with NO_COLOR or --no-color (script(1) gives a terminal).
if command -v script >/dev/null; then
  esc=$'\033['
  tty_out=$(TERM=xterm script -qec "'$ctl' --socket '$sock' status" /dev/null)
  check grep -qF "$esc" <<< "$tty_out"
  tty_out=$(TERM=xterm NO_COLOR=1 script -qec "'$ctl' --socket '$sock' status" /dev/null)
  check bash -c "! grep -qF \$'\\033[' <<< \"\$1\"" _ "$tty_out"
  tty_out=$(TERM=xterm script -qec "'$ctl' --socket '$sock' status --no-color" /dev/null)
  check bash -c "! grep -qF \$'\\033[' <<< \"\$1\"" _ "$tty_out"
fi
expect 0 status --socket "$sock"
check bash -c "! grep -qF \$'\\033[' <<< \"\$1\"" _ "$out"

# Permission denied: exit 4, the socket's (here its directory's) group and how to join it.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  # Group root may enter, others may not: root's group is no group to join.
  chmod 0750 "$tmp"
  out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$ctl" --socket "$sock" status 2>&1)
  rc=$?
  check [ "$rc" = 4 ]
  check grep -q 'permission denied' <<< "$out"
  check grep -q 'run gllmctl with sudo' <<< "$out"
  # Another group (as gllmd.socket's gllm): the advice names it and how to join.
  group=$(getent group users daemon | head -1 | cut -d: -f1)
  if [ -n "$group" ]; then
    chgrp "$group" "$tmp"
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$ctl" --socket "$sock" status 2>&1)
    rc=$?
    check [ "$rc" = 4 ]
    check grep -q "group '$group'" <<< "$out"
    check grep -q "usermod -aG $group \$USER" <<< "$out"
    check grep -q 'log in again' <<< "$out"
  fi
fi

# Administration: a gllmd with a configuration file. A file with an error is refused by
# reload, with the reason; a peer that is not an administrator is refused (exit 4) until
# admin_users names it; drain --wait returns once gllmd has stopped.
chmod 0755 "$adm"
printf 'log_level = info\n' > "$adm/gllmd.conf"
"$gllmd" --config "$adm/gllmd.conf" --socket "$adm/gllmd.sock" --backend cpu --threads 1 \
  > "$tmp/gllmd-adm.log" 2>&1 &
pid_adm=$!
up "$adm/gllmd.sock"
printf 'log_level = info\nfrobnicate = 1\n' > "$adm/gllmd.conf"
expect 1 -s "$adm/gllmd.sock" reload
check grep -q "unknown key 'frobnicate'" <<< "$err"
check grep -q 'running configuration is kept' <<< "$err"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod 0666 "$adm/gllmd.sock"
  as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$ctl" "$@"; }
  out=$(as_nobody -s "$adm/gllmd.sock" client list 2>&1); rc=$?
  check [ "$rc" = 4 ]
  check grep -q 'for administrators only' <<< "$out"
  check grep -q 'admin_users or admin_groups' <<< "$out"
  for verb in drain reload "client disconnect 1" "client jobs 1"; do
    # shellcheck disable=SC2086
    as_nobody -s "$adm/gllmd.sock" $verb >/dev/null 2>&1; rc=$?
    check [ "$rc" = 4 ]
  done
  as_nobody -s "$adm/gllmd.sock" status >/dev/null 2>&1; rc=$?
  check [ "$rc" = 0 ]
  printf 'admin_users = 65534\n' > "$adm/gllmd.conf"
  expect 0 -s "$adm/gllmd.sock" reload
  out=$(as_nobody -s "$adm/gllmd.sock" client list 2>&1); rc=$?
  check [ "$rc" = 0 ]
  check grep -q ' 65534 gllmctl  *yes ' <<< "$out"
fi
expect 0 -s "$adm/gllmd.sock" drain --wait
check grep -q '^gllmd: draining, 0 jobs in flight$' <<< "$out"
check grep -qx 'gllmd: drained and stopped' <<< "$out"
wait "$pid_adm"; rc=$?
pid_adm=
check [ "$rc" = 0 ]
check [ ! -e "$adm/gllmd.sock" ]
check grep -q 'drain from client [0-9]* (pid [0-9]*, uid [0-9]*, gllmctl): no new connections' "$tmp/gllmd-adm.log"

# With device_processes = off gllmd runs the device itself: no process to name.
printf 'device_processes = off\n' > "$tmp/inproc.conf"
"$gllmd" --config "$tmp/inproc.conf" --socket "$tmp/inproc.sock" --backend cpu --threads 1 \
  > "$tmp/gllmd-inproc.log" 2>&1 &
pid_inproc=$!
up "$tmp/inproc.sock"
expect 0 status --json --socket "$tmp/inproc.sock"
check grep -q '"process_pid": 0,' <<< "$out"
expect 0 status --socket "$tmp/inproc.sock"
check grep -q '^  device 0: ' <<< "$out"

# The completions offer every command of `gllmctl help`, and every option each command's
# help lists: bash's by running it, zsh's and fish's by reading them (neither shell need be
# installed).
opts_of() { "$ctl" help "$1" | grep -o '^  --[a-z-]*' | tr -d ' ' | sort -u; }
if command -v bash >/dev/null; then
  got=$(bash -c "source '$src/completion/gllmctl.bash'; COMP_WORDS=(gllmctl ''); COMP_CWORD=1;
                 _gllmctl; printf '%s\n' \"\${COMPREPLY[@]}\"")
  for c in $commands; do check grep -qx "$c" <<< "$got"; done
  for c in $commands; do
    got=$(bash -c "source '$src/completion/gllmctl.bash'; COMP_WORDS=(gllmctl $c --);
                   COMP_CWORD=2; _gllmctl; printf '%s\n' \"\${COMPREPLY[@]}\"")
    for o in $(opts_of "$c"); do
      grep -qx -- "$o" <<< "$got" || { echo "FAIL: bash completion: $c $o"; fail=$((fail + 1)); }
    done
  done
  got=$(bash -c "source '$src/completion/gllmctl.bash'; COMP_WORDS=(gllmctl client '');
                 COMP_CWORD=2; _gllmctl; printf '%s\n' \"\${COMPREPLY[@]}\"")
  check [ "$(sort <<< "$got" | tr '\n' ' ')" = "disconnect jobs list " ]
fi
for c in $commands; do
  check grep -q "'$c:" "$src/completion/_gllmctl"
  check grep -q -- "-a $c -d " "$src/completion/gllmctl.fish"
  for o in $(opts_of "$c"); do
    case $o in --json | --format) continue ;; esac   # global options, offered everywhere
    grep -q -- "'$o\[" "$src/completion/_gllmctl" ||
      { echo "FAIL: zsh completion: $c $o"; fail=$((fail + 1)); }
    grep -q -- "__fish_seen_subcommand_from $c\" .*-l ${o#--} " "$src/completion/gllmctl.fish" ||
      { echo "FAIL: fish completion: $c $o"; fail=$((fail + 1)); }
  done
done

# The man page documents every command and exit status 4.
for c in $commands; do check grep -q "^\\.B $c\$" "$src/man/gllmctl.1"; done
check grep -q '^\.B 4$' "$src/man/gllmctl.1"

echo "$passed passed, $fail failed"
[ "$fail" = 0 ]
