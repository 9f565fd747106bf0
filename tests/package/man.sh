#!/usr/bin/env bash
# The man pages format without a warning from groff (-ww: all of them) or man, and each
# names the program or library it documents. Usage: man.sh MAN_DIR
set -u
dir=$1 fail=0 n=0
command -v groff >/dev/null || { echo "SKIPPED: groff not installed"; exit 77; }
for page in "$dir"/*.[1-8]; do
  n=$((n + 1))
  warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
  if command -v man >/dev/null; then
    warnings+=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
  fi
  if [ -n "$warnings" ]; then echo "FAIL: $page:"; echo "$warnings"; fail=1; fi
  name=$(basename "$page"); name=${name%.*}
  grep -q "^$name \\\\- " "$page" || { echo "FAIL: $page: no NAME line for $name"; fail=1; }
done
[ "$n" -ge 4 ] || { echo "FAIL: only $n man pages in $dir"; fail=1; }
[ "$fail" = 0 ] && echo "$n man pages format cleanly"
exit "$fail"
