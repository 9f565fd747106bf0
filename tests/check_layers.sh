#!/bin/sh
# The layering, checked from the sources: (1) no include cycle among daemon/'s modules (x.c
# and x.h are one module; an edge a -> b when a file of a includes b's header), so no file
# calls back into one that calls it; (2) a file under daemon/backends/<x>/ includes quoted
# headers only from daemon/backends/common/, its own folder, include/, kernels/ and common/
# (declarations of outside APIs, such as the CUDA driver's, shared with the client); (3)
# nothing under kernels/ includes a header of daemon/: kernels are called, never calling; (4)
# the codec (proto/) includes nothing of daemon/ or client/, and client/ nothing of daemon/.
# Usage: check_layers.sh SOURCE_ROOT
set -u
root=$(cd "${1:-.}" && pwd)
cd "$root" || exit 2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# Where a quoted include resolves, as C does it: beside the including file first, then the
# build's include directories (the daemon's and every backend's).
search="daemon/backends/common daemon include proto kernels/cuda kernels/portable"
for d in daemon/backends/*/; do search="$search ${d%/}"; done

resolve() {  # $1 including file, $2 included name -> path relative to root, or nothing
    for dir in "$(dirname "$1")" $search; do
        if [ -f "$dir/$2" ]; then
            realpath --relative-to="$root" "$dir/$2"
            return
        fi
    done
}

# (2) Backends: each quoted include must resolve inside what the backend may see.
for f in $(find daemon/backends -name '*.[ch]' -o -name '*.S' | sort); do
    case "$f" in daemon/backends/common/*) own=daemon/backends/common ;;
                 *) own=$(echo "$f" | cut -d/ -f1-3) ;; esac
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
    while read -r inc; do
        ok=
        for dir in "$(dirname "$f")" daemon/backends/common "$own" include kernels/cuda kernels/portable common; do
            [ -f "$dir/$inc" ] || continue
            p=$(realpath --relative-to="$root" "$dir/$inc")
            case "$p" in daemon/backends/common/* | "$own"/* | include/* | kernels/* | common/*) ok=1 ;; esac
            break
        done
        if [ -z "$ok" ]; then
            echo "check_layers: $f includes \"$inc\": a backend sees only daemon/backends/common/," \
                 "its own folder, include/, kernels/ and common/" >&2
            echo x >> "$tmp/bad"
        fi
    done
done
if [ -f "$tmp/bad" ]; then fail=1; fi

# (3) Kernels: every quoted include resolves inside kernels/ (or include/, common/).
for f in $(find kernels -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' | sort); do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
    while read -r inc; do
        for dir in "$(dirname "$f")" kernels/cuda kernels/portable include common daemon/backends/common daemon; do
            [ -f "$dir/$inc" ] || continue
            case "$(realpath --relative-to="$root" "$dir/$inc")" in
                daemon/*) echo "check_layers: $f includes \"$inc\" from daemon/: kernels call nothing" \
                               "of the daemon" >&2
                          echo x >> "$tmp/bad_kernels" ;;
            esac
            break
        done
    done
done
if [ -f "$tmp/bad_kernels" ]; then fail=1; fi

# (4) The sides: a quoted include of a file of $1, resolved beside it, then in the folders
# $2 it may see, then in the folders $3 it must not; one that lands in $3 is refused.
check_side() {
    for f in $(find "$1" -name '*.[ch]' | sort); do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
        while read -r inc; do
            p=
            for dir in "$(dirname "$f")" $2 $3; do
                if [ -f "$dir/$inc" ]; then
                    p=$(realpath --relative-to="$root" "$dir/$inc")
                    break
                fi
            done
            for bad in $3; do
                case "$p" in "$bad"/*)
                    echo "check_layers: $f includes \"$inc\" ($p): $1/ must not see $bad/" >&2
                    echo x >> "$tmp/side" ;;
                esac
            done
        done
    done
}
check_side proto "include" "daemon client"
check_side client "proto include common" "daemon"
if [ -f "$tmp/side" ]; then fail=1; fi

# (1) Module graph of daemon/: edges "a b" for every quoted include that resolves to another
# daemon/ module (and "a a", so every module is a node).
for f in $(find daemon -name '*.[ch]' | sort); do
    from=${f%.*}
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
    while read -r inc; do
        p=$(resolve "$f" "$inc")
        case "$p" in daemon/*) if [ "${p%.*}" != "$from" ]; then echo "$from ${p%.*}"; fi ;; esac
    done
    echo "$from $from"
done | sort -u > "$tmp/edges"

# Modules on a cycle, grouped by mutual reachability (the graph is small: a closure will do).
awk '
    { n[$1] = 1; n[$2] = 1; if ($1 != $2) r[$1, $2] = 1 }
    END {
        for (k in n) for (i in n) if ((i, k) in r) for (j in n) if ((k, j) in r) r[i, j] = 1
        for (i in n) if ((i, i) in r) {
            g = ""
            for (j in n) if ((i, j) in r && (j, i) in r) g = g " " j
            print g
        }
    }' "$tmp/edges" |
while read -r group; do
    echo "$group" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//'
    echo
done | sort -u > "$tmp/cycles"

while read -r cycle; do
    [ -n "$cycle" ] || continue
    echo "check_layers: include cycle among: $cycle" >&2
    fail=1
done < "$tmp/cycles"

if [ "$fail" = 0 ]; then
    echo "check_layers: daemon/ is layered ($(awk '$1 != $2' "$tmp/edges" | wc -l) include edges" \
         "among $(awk '$1 == $2' "$tmp/edges" | wc -l) modules checked); proto/ sees neither" \
         "daemon/ nor client/, client/ not daemon/, kernels/ not daemon/"
fi
exit "$fail"
