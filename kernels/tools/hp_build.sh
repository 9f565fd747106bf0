#!/usr/bin/env bash
# Builds the prefill harness (kernels/tools/hp_trace.cu) from kernels/cuda with patches applied,
# for a variant to time with kernels/tools/hp_ab.py:
#   kernels/tools/hp_build.sh OUT [PATCH...]
# PATCH: a diff of kernels/cuda, and of the harness itself where a variant needs it (a tensor
# map's box), as `git diff` writes it (paths from the repository's root), applied to a copy;
# the tree is not touched. The harness is untraced (-DHP_NO_TRACE) unless
# HP_TRACE=1. Prints each harness kernel's spills and every ptxas note on the wgmma pipeline
# (C75xx: a serialising one costs 25-30%), so a variant that lost its registers shows before it
# is timed. Needs nvcc (sm_90a); NVCC names another.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -lt 1 ]; then
  echo "usage: kernels/tools/hp_build.sh OUT [PATCH...]" >&2
  exit 2
fi
out=$1
shift
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null || { echo "hp_build.sh: no $nvcc" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels/tools"
cp -r "$root/kernels/cuda" "$tmp/kernels/cuda"
cp "$root/kernels/tools/hp_trace.cu" "$tmp/kernels/tools/"
for p in "$@"; do
  patch=$(cd "$(dirname "$p")" && pwd)/$(basename "$p")
  (cd "$tmp" && git apply -p1 --include='kernels/cuda/*' --include='kernels/tools/hp_trace.cu' "$patch") ||
    { echo "hp_build.sh: $p does not apply to kernels/cuda or the harness" >&2; exit 1; }
done
trace=-DHP_NO_TRACE
[ "${HP_TRACE:-0}" = 1 ] && trace=
# shellcheck disable=SC2086
if ! "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I "$tmp/kernels/cuda" $trace \
     -Xptxas -v -o "$out" "$tmp/kernels/tools/hp_trace.cu" -lcuda 2> "$tmp/ptxas.log"; then
  grep -v -E '^ptxas info|^    [0-9]+ bytes stack' "$tmp/ptxas.log" >&2
  echo "hp_build.sh: nvcc failed" >&2
  exit 1
fi
# The harness's own kernels (traced<CAUSAL, D>): name, spills; then the C75xx notes of any.
awk '/Function properties for _Z6traced/ {
       s = $0; sub(/.*tracedILb/, "", s); c = substr(s, 1, 1)
       sub(/^[01]ELi/, "", s); sub(/E.*/, "", s); name = "D" s (c == "1" ? " causal" : ""); next }
     name != "" && /spill stores/ { sub(/^ +/, ""); printf "%-12s %s\n", name, $0; name = "" }' \
  "$tmp/ptxas.log"
grep -E '\(C75[0-9]+\)' "$tmp/ptxas.log" | sed 's/^ptxas info    : //' || true
echo "built $out"
