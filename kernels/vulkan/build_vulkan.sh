#!/usr/bin/env bash
# Rebuilds the Vulkan backend's SPIR-V (kernels/prebuilt/vulkan/) and its MANIFEST from the
# GLSL in kernels/vulkan/ with glslc, so a build without glslc embeds the same kernels.
#   kernels/vulkan/build_vulkan.sh          rebuild when the sources differ from the manifest
#   kernels/vulkan/build_vulkan.sh --force  rebuild regardless
#   kernels/vulkan/build_vulkan.sh --check  exit 1 when the manifest does not match sources and images
#   kernels/vulkan/build_vulkan.sh --compare  compile into a temporary folder and exit 1 when
#                                    any image differs from the checked-in one (needs glslc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/kernels/vulkan
out=$root/kernels/prebuilt/vulkan
manifest=$out/MANIFEST
# image:source:defines. SPIR-V 1.5 (Vulkan 1.2): buffer device addresses and subgroups are core.
kernels="attn_f32:attn.comp:-DT_F32 -DELEM_BYTES=4
attn_f16:attn.comp:-DT_F16 -DELEM_BYTES=2
attn_bf16:attn.comp:-DT_BF16 -DELEM_BYTES=2
paged_f32:paged.comp:-DT_F32 -DELEM_BYTES=4
paged_f16:paged.comp:-DT_F16 -DELEM_BYTES=2
paged_bf16:paged.comp:-DT_BF16 -DELEM_BYTES=2
append:append.comp:"
images() { while IFS=: read -r name _; do echo "$name.spv"; done <<< "$kernels"; }

source_hashes() {
  (cd "$root" && find kernels/vulkan -type f \( -name '*.comp' -o -name '*.glsl' \) | LC_ALL=C sort |
     xargs sha256sum)
}
image_hashes() { (cd "$out" && images | xargs sha256sum); }

manifest_matches() {
  [ -f "$manifest" ] || return 1
  for i in $(images); do [ -f "$out/$i" ] || return 1; done
  diff <(source_hashes) <(sed -n 's/^source //p' "$manifest") >/dev/null || return 1
  diff <(image_hashes) <(sed -n 's/^image //p' "$manifest") >/dev/null
}

glslc=${GLSLC:-glslc}
compile() {   # compile DIR
  while IFS=: read -r name file defs; do
    # shellcheck disable=SC2086
    "$glslc" --target-env=vulkan1.2 -O $defs -o "$1/$name.spv" "$src/$file"
  done <<< "$kernels"
}

case "${1:-}" in
  --check)
    if manifest_matches; then echo "kernels/prebuilt/vulkan matches kernels/vulkan"; exit 0; fi
    echo "kernels/prebuilt/vulkan is stale: sources or images differ from its MANIFEST;" \
         "run kernels/vulkan/build_vulkan.sh" >&2
    exit 1 ;;
  --compare)
    if ! command -v "$glslc" >/dev/null 2>&1; then echo "no $glslc here" >&2; exit 77; fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    compile "$tmp"
    bad=0
    for i in $(images); do
      cmp -s "$tmp/$i" "$out/$i" || { echo "kernels/prebuilt/vulkan/$i differs from what $glslc makes of kernels/vulkan" >&2; bad=1; }
    done
    [ "$bad" = 0 ] && echo "kernels/prebuilt/vulkan is what $glslc makes of kernels/vulkan"
    exit "$bad" ;;
  --force) ;;
  "") if manifest_matches; then exit 0; fi ;;
  *) echo "usage: $0 [--force|--check|--compare]" >&2; exit 2 ;;
esac

if ! command -v "$glslc" >/dev/null 2>&1; then
  echo "kernels/vulkan/build_vulkan.sh: no $glslc here" >&2
  exit 1
fi
mkdir -p "$out"
compile "$out"
{
  echo "# gllm Vulkan kernels, prebuilt: regenerate with kernels/vulkan/build_vulkan.sh"
  echo "glslc $("$glslc" --version | head -1)"
  echo "target vulkan1.2 (SPIR-V 1.5)"
  source_hashes | sed 's/^/source /'
  image_hashes | sed 's/^/image /'
} > "$manifest"
echo "kernels/prebuilt/vulkan: $(images | wc -l) images rebuilt"
