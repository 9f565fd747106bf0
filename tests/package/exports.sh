#!/usr/bin/env bash
# The shared library's ABI is exactly the public headers: every function declared in
# include/gllm/*.h is a defined dynamic symbol of libgllm-client.so, and nothing else is
# exported (the codec's internals stay hidden). Usage: exports.sh LIBRARY INCLUDE_DIR
set -u
lib=$1 inc=$2
# gcc, whatever compiled the library: clang has no -aux-info.
cc=gcc
command -v "$cc" >/dev/null || { echo "SKIPPED: gcc (for -aux-info) not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# gcc's -aux-info lists every prototype the headers declare, whatever macros they use; static
# inline helpers (gllm/elem.h) are compiled into the caller, not exported.
for h in "$inc"/gllm/*.h; do echo "#include <gllm/$(basename "$h")>"; done > "$tmp/all.c"
"$cc" -std=gnu11 -I"$inc" -aux-info "$tmp/aux" -fsyntax-only "$tmp/all.c" || exit 1
grep "$inc/gllm/" "$tmp/aux" | grep -v ' static ' | sed -nE 's/^[^(]*[ *]([a-z_0-9]+) \(.*/\1/p' | sort -u > "$tmp/declared"
nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort -u > "$tmp/exported"

fail=0
n=$(wc -l < "$tmp/declared")
if [ "$n" -lt 20 ]; then
  echo "FAIL: only $n declarations found in $inc/gllm: the parsing is broken"; exit 1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
  echo "FAIL: declared in include/gllm but not exported from $lib:"; echo "$missing"; fail=1
fi
if [ -n "$extra" ]; then
  echo "FAIL: exported from $lib but not declared in include/gllm:"; echo "$extra"; fail=1
fi
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "$n public functions, all exported; SONAME $soname"
[ "$fail" = 0 ]
