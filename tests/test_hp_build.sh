#!/usr/bin/env bash
# kernels/tools/hp_build.sh's refusals, which come before nvcc compiles anything: no arguments,
# a patch that does not apply to kernels/cuda (the tree left as it was). Skipped without nvcc.
# Usage: test_hp_build.sh SOURCE_DIR
set -uo pipefail
src=${1:?source dir}
tool=$src/kernels/tools/hp_build.sh
command -v "${NVCC:-nvcc}" >/dev/null || { echo "skipped: no nvcc"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }

"$tool" > "$tmp/out" 2>&1; rc=$?
check "no arguments: exit 2 and the usage" '[ $rc = 2 ] && grep -q "usage:" "$tmp/out"'

before=$(sha256sum "$src/kernels/cuda/attention_params.h")
cat > "$tmp/stale.patch" <<'P'
--- a/kernels/cuda/attention_params.h
+++ b/kernels/cuda/attention_params.h
@@ -1,3 +1,3 @@
-this line is not in the file
+nor is this one
 nor this
P
"$tool" "$tmp/hp" "$tmp/stale.patch" > "$tmp/out" 2>&1; rc=$?
check "a patch that does not apply: exit 1, named" \
  '[ $rc = 1 ] && grep -q "stale.patch does not apply to kernels/cuda" "$tmp/out"'
check "the tree untouched" '[ "$(sha256sum "$src/kernels/cuda/attention_params.h")" = "$before" ]'
check "no binary written" '[ ! -e "$tmp/hp" ]'

"$tool" "$tmp/hp" "$tmp/missing.patch" > "$tmp/out" 2>&1; rc=$?
check "a missing patch: exit 1" '[ $rc = 1 ]'

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
