#!/usr/bin/env bash
# Rebuilds the portable kernels' prebuilt images and their MANIFEST from kernels/portable/:
# AMDGPU code objects (clang-19, HIP language, no GPU headers or device libraries) for the HSA
# backend, and an NVIDIA fatbin of the same source (nvcc) for the cuda-portable backend.
#   kernels/build_portable.sh          rebuild when the sources differ from the manifest
#   kernels/build_portable.sh --force  rebuild regardless
#   kernels/build_portable.sh --check  exit 1 when the manifest does not match sources and images
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/kernels/portable
out=$root/kernels/prebuilt/portable
manifest=$out/MANIFEST
# target:wave size. CDNA (gfx9) runs 64-wide waves, RDNA (gfx11, gfx12) 32-wide ones.
amd_targets="gfx90a:64 gfx942:64 gfx1100:32 gfx1201:32"
nv_gencode="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
 -gencode=arch=compute_80,code=compute_80"
nv_targets="sm_80 sm_90 compute_80"
images() { for t in $amd_targets; do echo "${t%:*}.hsaco"; done; echo nvidia.fatbin; }

source_hashes() {
  (cd "$root" && find kernels/portable -type f \( -name '*.cpp' -o -name '*.h' \) | LC_ALL=C sort |
     xargs sha256sum)
}
image_hashes() { (cd "$out" && images | xargs sha256sum); }

manifest_matches() {
  [ -f "$manifest" ] || return 1
  for i in $(images); do [ -f "$out/$i" ] || return 1; done
  diff <(source_hashes) <(sed -n 's/^source //p' "$manifest") >/dev/null || return 1
  diff <(image_hashes) <(sed -n 's/^image //p' "$manifest") >/dev/null
}

case "${1:-}" in
  --check)
    if manifest_matches; then echo "kernels/prebuilt/portable matches kernels/portable"; exit 0; fi
    echo "kernels/prebuilt/portable is stale: sources or images differ from its MANIFEST;" \
         "run kernels/build_portable.sh" >&2
    exit 1 ;;
  --force) ;;
  "") if manifest_matches; then exit 0; fi ;;
  *) echo "usage: $0 [--force|--check]" >&2; exit 2 ;;
esac

clang=${CLANG:-clang-19}
nvcc=${NVCC:-nvcc}
for tool in "$clang" "$nvcc"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "kernels/build_portable.sh: no $tool here (clang-19 and nvcc are both needed)" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in $amd_targets; do
  arch=${t%:*}
  "$clang" -x hip --cuda-device-only --no-gpu-bundle-output -nogpulib -nogpuinc -O3 -std=c++17 \
    --offload-arch="$arch" -DPK_WAVE="${t#*:}" -o "$tmp/$arch.hsaco" "$src/pk_kernels.cpp"
done
# shellcheck disable=SC2086
"$nvcc" -fatbin -O3 -std=c++17 -DPK_WAVE=32 $nv_gencode -x cu -o "$tmp/nvidia.fatbin" \
  "$src/pk_kernels.cpp"
mkdir -p "$out"
for i in $(images); do mv "$tmp/$i" "$out/$i"; done
{
  echo "# gllm portable kernels, prebuilt: regenerate with kernels/build_portable.sh"
  echo "clang $("$clang" --version | sed -n 's/.*clang version \([0-9.]*\).*/\1/p;q')"
  echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "targets $(for t in $amd_targets; do printf '%s ' "${t%:*}"; done)$nv_targets"
  source_hashes | sed 's/^/source /'
  image_hashes | sed 's/^/image /'
} > "$manifest"
echo "kernels/build_portable.sh: wrote $(images | tr '\n' ' ')into kernels/prebuilt/portable"
