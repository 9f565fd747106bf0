#!/usr/bin/env bash
# Rebuilds kernels/prebuilt/gllm_kernels.fatbin and its MANIFEST from kernels/cuda/ with nvcc.
#   kernels/build.sh          rebuild when the sources differ from the manifest
#   kernels/build.sh --force  rebuild regardless
#   kernels/build.sh --check  exit 1 when the manifest does not match sources and image
# A change meant to leave the code alone: kernels/tools/fatbin_diff.py OLD NEW compares the images.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/kernels/cuda
out=$root/kernels/prebuilt
fatbin=$out/gllm_kernels.fatbin
manifest=$out/MANIFEST
# sm_90a code runs only on 9.0 chips; newer chips take the compute_80 PTX.
gencode="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86
 -gencode=arch=compute_89,code=sm_89 -gencode=arch=compute_90a,code=sm_90a
 -gencode=arch=compute_80,code=compute_80"
targets="sm_80 sm_86 sm_89 sm_90a compute_80"

source_hashes() {
  (cd "$root" && find kernels/cuda -type f \( -name '*.cu' -o -name '*.h' -o -name '*.cuh' \) | LC_ALL=C sort |
     xargs sha256sum)
}

manifest_matches() {
  [ -f "$manifest" ] && [ -f "$fatbin" ] || return 1
  diff <(source_hashes) <(sed -n 's/^source //p' "$manifest") >/dev/null || return 1
  [ "$(sha256sum < "$fatbin" | cut -d' ' -f1)" = "$(sed -n 's/^fatbin //p' "$manifest")" ]
}

case "${1:-}" in
  --check)
    if manifest_matches; then echo "kernels/prebuilt matches kernels/cuda"; exit 0; fi
    echo "kernels/prebuilt is stale: sources or image differ from MANIFEST; run kernels/build.sh" >&2
    exit 1 ;;
  --force) ;;
  "") if manifest_matches; then exit 0; fi ;;
  *) echo "usage: $0 [--force|--check]" >&2; exit 2 ;;
esac

nvcc=${NVCC:-nvcc}
if ! command -v "$nvcc" >/dev/null 2>&1; then
  echo "kernels/build.sh: sources changed but no nvcc here; the checked-in image is stale" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
if ! "$nvcc" -fatbin -O3 -std=c++17 $gencode -Xptxas -v -o "$tmp/k.fatbin" "$src/gllm_kernels.cu" \
  2> "$tmp/ptxas.log"; then
  grep -v -E '^ptxas info|^    [0-9]+ bytes stack' "$tmp/ptxas.log" >&2   # the errors, not the report
  echo "kernels/build.sh: nvcc failed" >&2
  exit 1
fi
# The report kept beside the image: each kernel's registers and spills, and every note of
# ptxas on the wgmma pipeline (C75xx). Those seen here saying it serialised a kernel's wgmma
# (each waited for before the next) were C7511, C7515 and C7517, not only C7514; test_fatbin
# finds serialised wgmma in the machine code itself, notes or not, and fails.
grep -E 'entry function|registers|spill|\(C75[0-9]+\)' "$tmp/ptxas.log" > "$out/ptxas.txt" || true
mv "$tmp/k.fatbin" "$fatbin"
{
  echo "# gllm prebuilt CUDA kernels: regenerate with kernels/build.sh"
  echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "targets $targets"
  source_hashes | sed 's/^/source /'
  echo "fatbin $(sha256sum < "$fatbin" | cut -d' ' -f1)"
} > "$manifest"
echo "kernels/build.sh: wrote $(basename "$fatbin") ($(stat -c %s "$fatbin") bytes) for $targets"
