#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds the README's example against the
# INSTALLED library, with pkg-config and with find_package(gllm) (shared and static), then
# runs each build against a gllmd from the build tree.
# Usage: installed.sh BUILD_DIR SOURCE_DIR GLLMD VERSION CC
set -u
build=$(realpath "$1") src=$(realpath "$2") gllmd=$3 version=$4 cc=$5
. "$src/tests/package/lib.sh"
tmp=$(mktemp -d)
trap 'stop_gllmd; rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail=0

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
readme_example "$src/README.md" "$tmp/example.c" || exit 1
pc=$(find "$prefix" -name gllm.pc)
[ -n "$pc" ] || { echo "FAIL: no gllm.pc installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")

# Nothing of the source or build tree may leak into what a user compiles with.
leaks=$(grep -rlF -e "$src" -e "$build" "$pc" "$libdir/cmake/gllm")
if [ -n "$leaks" ]; then
  echo "FAIL: installed package files name the source or build tree: $leaks"; fail=1
fi
if ! grep -q "^ExecStart=$prefix/sbin/gllmd\$" "$prefix/lib/systemd/system/gllmd.service"; then
  echo "FAIL: the installed unit does not start the installed gllmd"; fail=1
fi

# pkg-config
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs gllm) ||
  { echo "FAIL: pkg-config --cflags --libs gllm"; exit 1; }
# shellcheck disable=SC2086 # the flags are words
"$cc" -Wall -Werror -o "$tmp/example-pc" "$tmp/example.c" $flags -Wl,-rpath,"$libdir" ||
  { echo "FAIL: the example does not build with pkg-config ($flags)"; exit 1; }

# find_package
mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(gllm_example C)
find_package(gllm 0.1 REQUIRED)
add_executable(example-cmake example.c)
target_link_libraries(example-cmake PRIVATE gllm::client)
add_executable(example-static example.c)
target_link_libraries(example-static PRIVATE gllm::client_static)
CM
cp "$tmp/example.c" "$tmp/cm/"
if ! { cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_C_COMPILER="$cc" \
         -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF &&
       cmake --build "$tmp/cm/build"; } >"$tmp/cm.log" 2>&1; then
  cat "$tmp/cm.log"; echo "FAIL: the example does not build with find_package(gllm)"; exit 1
fi

# Each dynamic build resolves libgllm-client from the prefix; the static one not at all.
for exe in "$tmp/example-pc" "$tmp/cm/build/example-cmake"; do
  where=$(ldd "$exe" | awk '$1 ~ /^libgllm-client/ { print $3 }')
  case $where in
    "$libdir"/*) ;;
    *) echo "FAIL: $exe loads libgllm-client from '${where}', not $libdir"; fail=1 ;;
  esac
done
if ldd "$tmp/cm/build/example-static" | grep -q libgllm-client; then
  echo "FAIL: example-static links the shared library"; fail=1
fi

start_gllmd "$gllmd" "$tmp/gllmd.sock" || exit 1
for exe in "$tmp/example-pc" "$tmp/cm/build/example-cmake" "$tmp/cm/build/example-static"; do
  run_example "$exe" "$tmp/gllmd.sock" "$version" || fail=1
done
# Without a daemon the example says why, in gllm_strerror's words, and fails.
out=$(GLLM_SOCKET=$tmp/none.sock "$tmp/example-pc" 2>&1) && { echo "FAIL: ran without gllmd"; fail=1; }
grep -q '^connect: No such file or directory$' <<< "$out" ||
  { echo "FAIL: no gllm_strerror message without a daemon: $out"; fail=1; }
[ "$fail" = 0 ] && echo "installed library: pkg-config, find_package and static builds pass"
exit "$fail"
