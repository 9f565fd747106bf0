#!/usr/bin/env bash
# Builds the Debian packages and the tarball with CPack from a /usr-configured tree,
# checks what each package holds and depends on, runs lintian, unpacks the packages into a
# scratch root, makes the gllm user, groups and directories there with the packaged
# sysusers and tmpfiles files, and builds and runs the README's example and the Python
# package there.
# Usage: debs.sh SOURCE_DIR PKG_BUILD_DIR VERSION [CMAKE_ARGS...]
set -u
src=$(realpath "$1") pkgbuild=$2 version=$3
shift 3
. "$src/tests/package/lib.sh"
for tool in dpkg-deb dpkg-shlibdeps file lintian pkg-config; do
  command -v $tool >/dev/null || { echo "SKIPPED: $tool not installed"; exit 77; }
done
tmp=$(mktemp -d)
trap 'stop_gllmd; rm -rf "$tmp"' EXIT
fail=0
check() { if ! "$@"; then echo "FAIL: $*"; fail=1; fi; }

# Debian's hardening flags, as a package build gets them.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
if [ ! -f "$pkgbuild/CMakeCache.txt" ]; then
  CFLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
  LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
    cmake -S "$src" -B "$pkgbuild" -DCMAKE_INSTALL_PREFIX=/usr -DGLLM_BUILD_TESTS=OFF "$@" \
      >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
fi
rm -rf "$pkgbuild/packages"
{ cmake --build "$pkgbuild" -j 2 && (cd "$pkgbuild" && cpack); } >"$tmp/build.log" 2>&1 ||
  { tail -40 "$tmp/build.log"; echo "FAIL: building the packages"; exit 1; }

arch=$(dpkg --print-architecture)
out=$pkgbuild/packages
daemon=$out/gllmd_${version}-1_${arch}.deb
runtime=$out/libgllm-client0_${version}-1_${arch}.deb
dev=$out/libgllm-client-dev_${version}-1_${arch}.deb
python=$out/python3-gllm_${version}-1_all.deb
tarball=$out/gllm_${version}_${arch}.tar.gz
for f in "$daemon" "$runtime" "$dev" "$python" "$tarball"; do
  [ -f "$f" ] || { echo "FAIL: $(basename "$f") not built; there are: $(ls "$out")"; exit 1; }
done

# What each package must hold (regular files and links, relative to /).
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
lib=usr/lib/$ma
expect_daemon="usr/sbin/gllmd usr/bin/gllmctl usr/lib/systemd/system/gllmd.service
  usr/lib/systemd/system/gllmd.socket usr/lib/sysusers.d/gllm.conf usr/lib/tmpfiles.d/gllm.conf
  usr/share/doc/gllmd/copyright usr/share/doc/gllmd/changelog.gz
  usr/share/doc/gllmd/kernel-manifest.txt usr/share/doc/gllmd/gllmd.conf.example
  usr/share/man/man8/gllmd.8.gz usr/share/man/man1/gllmctl.1.gz usr/share/man/man5/gllmd.conf.5.gz"
expect_runtime="$lib/libgllm-client.so.0 $lib/libgllm-client.so.$version
  usr/share/doc/libgllm-client0/copyright"
expect_dev="usr/include/gllm/gllm.h usr/include/gllm/errors.h usr/include/gllm/version.h
  $lib/libgllm-client.so $lib/libgllm-client.a $lib/pkgconfig/gllm.pc
  $lib/cmake/gllm/gllmConfig.cmake $lib/cmake/gllm/gllmConfigVersion.cmake
  $lib/cmake/gllm/gllmTargets.cmake usr/share/man/man3/libgllm-client.3.gz
  usr/share/doc/libgllm-client-dev/copyright"
py=usr/lib/python3/dist-packages/gllm
expect_python="$py/__init__.py $py/_lib.py $py/client.py $py/paged.py $py/py.typed
  usr/share/doc/python3-gllm/copyright usr/share/doc/python3-gllm/changelog.gz"
list() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ { sub(/^\.\//, "", $6); print $6 }' | sort; }
for p in daemon runtime dev python; do
  case $p in
    daemon) deb=$daemon expect=$expect_daemon ;;
    runtime) deb=$runtime expect=$expect_runtime ;;
    dev) deb=$dev expect=$expect_dev ;;
    python) deb=$python expect=$expect_python ;;
  esac
  list "$deb" > "$tmp/$p.files"
  for f in $expect; do
    grep -qx "$f" "$tmp/$p.files" || { echo "FAIL: $(basename "$deb") lacks $f"; fail=1; }
  done
  outside=$(grep -v '^usr/' "$tmp/$p.files")
  [ -z "$outside" ] || { echo "FAIL: $(basename "$deb") installs outside /usr: $outside"; fail=1; }
done
check [ "$(grep -c '__pycache__\|\.pyc$' "$tmp/python.files")" = 0 ]
dups=$(sort "$tmp"/{daemon,runtime,dev,python}.files | uniq -d)
[ -z "$dups" ] || { echo "FAIL: files in more than one package: $dups"; fail=1; }
# The tarball is the same tree as the three packages together.
tar -tzf "$tarball" | grep -v '/$' | sed 's|^[^/]*/||' | sort > "$tmp/tar.files"
check cmp -s "$tmp/tar.files" <(sort "$tmp"/{daemon,runtime,dev,python}.files)

# Control data: shlibdeps found the daemon's libraries; the dev package pins the runtime.
deps=$(dpkg-deb -f "$daemon" Depends)
for d in libc6 libuv1 libsystemd0; do
  grep -q "$d" <<< "$deps" || { echo "FAIL: gllmd does not depend on $d: $deps"; fail=1; }
done
check grep -q "libgllm-client0 (= ${version}-1)" <<< "$(dpkg-deb -f "$dev" Depends)"
check grep -q "libgllm-client0 (>= ${version}-1)" <<< "$(dpkg-deb -f "$python" Depends)"
check grep -q "python3" <<< "$(dpkg-deb -f "$python" Depends)"
check [ "$(dpkg-deb -f "$python" Architecture)" = all ]
check grep -q "^libgllm-client 0 libgllm-client0" <<< "$(dpkg-deb -I "$runtime" shlibs)"
check grep -q "activate-noawait ldconfig" <<< "$(dpkg-deb -I "$runtime" triggers)"
for s in postinst prerm postrm; do
  dpkg-deb -I "$daemon" $s > "$tmp/$s" || { echo "FAIL: gllmd has no $s"; fail=1; continue; }
  check sh -n "$tmp/$s"
done
check grep -q 'systemd-sysusers gllm.conf' "$tmp/postinst"
# Nothing is enabled or started unasked.
if grep -v '^ *#' "$tmp/postinst" |
   grep -Eq 'systemctl.*(start|enable)|deb-systemd-(helper enable|invoke start)'; then
  echo "FAIL: gllmd's postinst enables or starts a unit"; fail=1
fi

# lintian: clean at error and warning level, the overrides shipped with their reasons.
if ! lintian --fail-on error,warning,info,pedantic --pedantic --display-info "$daemon" "$runtime" \
     "$dev" "$python" >"$tmp/lintian.log" 2>&1; then
  echo "FAIL: lintian:"; grep -v '^running with root' "$tmp/lintian.log"; fail=1
fi
grep -E '^[EWIP]:' "$tmp/lintian.log"

# Unpacked into a scratch root: the README's example builds against the packaged library
# with pkg-config and find_package, and runs against the packaged gllmd.
root=$tmp/root
for deb in "$daemon" "$runtime" "$dev" "$python"; do dpkg -x "$deb" "$root"; done
check grep -qx "ExecStart=/usr/sbin/gllmd" "$root/usr/lib/systemd/system/gllmd.service"
check cmp -s "$root/usr/share/doc/gllmd/kernel-manifest.txt" "$src/kernels/prebuilt/MANIFEST"
readme_example "$src/README.md" "$tmp/example.c" || exit 1
flags=$(PKG_CONFIG_SYSROOT_DIR=$root PKG_CONFIG_PATH=$root/$lib/pkgconfig pkg-config --cflags --libs gllm)
# shellcheck disable=SC2086 # the flags are words
"${CC:-cc}" -Wall -Werror -o "$tmp/example-pc" "$tmp/example.c" $flags -Wl,-rpath,"$root/$lib" ||
  { echo "FAIL: the example does not build with the packaged gllm.pc ($flags)"; exit 1; }
mkdir -p "$tmp/cm"
cp "$tmp/example.c" "$tmp/cm/"
printf '%s\n' 'cmake_minimum_required(VERSION 3.16)' 'project(gllm_example C)' \
  'find_package(gllm 0.1 REQUIRED)' 'add_executable(example-cmake example.c)' \
  'target_link_libraries(example-cmake PRIVATE gllm::client)' > "$tmp/cm/CMakeLists.txt"
{ cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$root/usr" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF && cmake --build "$tmp/cm/build"; } >"$tmp/cm.log" 2>&1 ||
  { cat "$tmp/cm.log"; echo "FAIL: the example does not build with the packaged gllmConfig.cmake"; exit 1; }
# What postinst runs, in the scratch root: the user with its home, the groups, the directories.
if command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null; then
  mkdir -p "$root/etc"
  check systemd-sysusers --root="$root" gllm.conf
  check systemd-tmpfiles --root="$root" --create gllm.conf
  check grep -q '^gllm:x:[0-9]*:[0-9]*:[^:]*:/var/lib/gllm:' "$root/etc/passwd"
  check grep -q '^gllm-admin:' "$root/etc/group"
  gllm_uid=$(awk -F: '$1 == "gllm" { print $3 }' "$root/etc/passwd")
  check [ "$(stat -c '%a %u' "$root/var/lib/gllm")" = "750 $gllm_uid" ]
  check [ -d "$root/run/gllm" ]
else
  echo "SKIPPED: the sysusers and tmpfiles check (no systemd-sysusers or systemd-tmpfiles)"
fi
start_gllmd "$root/usr/sbin/gllmd" "$tmp/gllmd.sock" || exit 1
for exe in "$tmp/example-pc" "$tmp/cm/build/example-cmake"; do
  where=$(LD_LIBRARY_PATH=$root/$lib ldd "$exe" | awk '$1 ~ /^libgllm-client/ { print $3 }')
  case $where in "$root"/*) ;; *) echo "FAIL: $exe loads libgllm-client from '$where'"; fail=1 ;; esac
  LD_LIBRARY_PATH=$root/$lib run_example "$exe" "$tmp/gllmd.sock" "$version" || fail=1
done
# The Python package as installed, against the packaged library and gllmd.
if command -v python3 >/dev/null; then
  pyout=$(cd "$tmp" && GLLM_LIBRARY=$root/$lib/libgllm-client.so.0 PYTHONDONTWRITEBYTECODE=1 \
          PYTHONPATH=$root/usr/lib/python3/dist-packages GLLM_SOCKET=$tmp/gllmd.sock python3 -c '
import gllm
assert gllm.__file__.startswith("'"$root"'"), gllm.__file__
with gllm.connect() as c:
    print(c.caps.backend, c.status().clients)' 2>&1) ||
    { echo "FAIL: python3-gllm: $pyout"; fail=1; }
  check grep -qx "cpu 1" <<< "$pyout"
fi
[ "$fail" = 0 ] && echo "packages: $(cd "$out" && echo *) all checked"
exit "$fail"
