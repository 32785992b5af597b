#!/usr/bin/env bash
# Builds fakegpu's container images without Docker: static musl binaries, then one OCI image
# archive per image under target/images/, named exactly as the install bundle (config/) names
# the images, so that loading an archive is all a cluster needs.
#
#   hack/images.sh             build the binaries (release, x86_64-unknown-linux-musl; the NVML
#                              library for glibc 2.17 and later, as containers and NVIDIA's
#                              components load it) and the archives
#   hack/images.sh archives    only (re)write the archives from binaries already built
#   hack/images.sh refs        print the image references the bundle names
#   hack/images.sh push REGISTRY   copy the archives to REGISTRY with skopeo, as
#                              REGISTRY/fakegpu/<image>:<tag> (FAKEGPU_REGISTRY_TLS_VERIFY=false
#                              for a plain-HTTP registry); prints reference and digest
#
# Loading them (see the README's install section):
#   ctr -n k8s.io images import target/images/fakegpu-operator.tar
#   kind load image-archive target/images/fakegpu-operator.tar
#   hack/images.sh push registry.example.com
#
# Needs: rustup's x86_64-unknown-linux-musl target, Debian's musl-tools (ring's C code is
# compiled with musl-gcc), and Python for cargo-zigbuild and zig from PyPI (the library's
# linker: hack/lib/zigbuild.sh). The archives are reproducible: the same binaries give the same digests.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/oci.sh
source "$repo/hack/lib/oci.sh"
# shellcheck source=hack/lib/zigbuild.sh
source "$repo/hack/lib/zigbuild.sh"

target=x86_64-unknown-linux-musl
bins=$repo/target/$target/release
# The NVML library is loaded into glibc processes (NVIDIA's device plugin, GFD and DRA driver, and
# any GPU container's), so it is built for glibc, the oldest still met (hack/lib/zigbuild.sh);
# the node agent's image carries it for the driver roots and containers it serves.
nvml_library=$(nvml_library_in "$repo")
cuda_library=$(cuda_library_in "$repo")
out=${FAKEGPU_IMAGES_DIR:-$repo/target/images}
images=(fakegpu-operator fakegpu-exporter fakegpu-node-agent)

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The reference the bundle's manifests give <image>: the bundle is the one place that names it.
ref_of() {
  local refs
  refs=$(grep -rhoE "image: *[^ ]*/$1:[^ ]+" "$repo/config" | sed 's/image: *//' | sort -u)
  [[ -n $refs ]] || die "config/ names no image $1"
  [[ $(wc -l <<<"$refs") -eq 1 ]] || die "config/ names $1 with different tags: $refs"
  echo "$refs"
}

build() {
  command -v musl-gcc >/dev/null || die "musl-gcc not found: apt-get install musl-tools"
  rustup target list --installed 2>/dev/null | grep -qx "$target" ||
    rustup target add "$target" >&2
  log "building ${images[*]} for $target (release; a cold build takes 5-10 minutes on 2 cores)"
  local start=$SECONDS
  # Paths of this machine stay out of the binaries, so another checkout builds the same bytes.
  RUSTFLAGS="--remap-path-prefix=$repo=/fakegpu --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo" \
    cargo build --locked --release --target "$target" \
    -p fakegpu-operator -p fakegpu-exporter -p fakegpu-node-agent -p fakegpu-smi >&2
  local zig needed
  zig=$(zigbuild_env "$repo")
  RUSTFLAGS="--remap-path-prefix=$repo=/fakegpu --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo" \
    PATH=$zig/bin:$PATH cargo zigbuild --locked --release --target "$nvml_zig_target" \
    -p fakegpu-nvml -p fakegpu-cuda >&2
  local library
  for library in "$nvml_library" "$cuda_library"; do
    needed=$(glibc_needed "$library")
    [[ $(printf '%s\n' "$needed" "GLIBC_$nvml_glibc" | sort -V | tail -n1) == "GLIBC_$nvml_glibc" ]] ||
      die "$library asks for $needed, newer than the glibc $nvml_glibc it is built for"
  done
  log "built in $((SECONDS - start))s; the NVML and CUDA libraries load with glibc $nvml_glibc and later"
}

# The files of one image: its binary, and for the node agent the nvidia-smi it installs on the
# node for containers given GPUs (it looks for it beside its own binary) and the NVML library
# and CUDA libraries it copies into driver roots (api::names::nvml::SHIPPED_LIBRARY,
# SHIPPED_CUDA_LIBRARY).
rootfs_of() { # <image> <dir>
  local image=$1 dir=$2
  mkdir -p "$dir/usr/local/bin"
  install -m 0755 "$bins/$image" "$dir/usr/local/bin/$image"
  if [[ $image == fakegpu-node-agent ]]; then
    install -m 0755 "$bins/nvidia-smi" "$dir/usr/local/bin/nvidia-smi"
    install -D -m 0644 "$nvml_library" "$dir/usr/local/lib/fakegpu/libnvidia-ml.so.1"
    install -D -m 0644 "$cuda_library" "$dir/usr/local/lib/fakegpu/libcuda.so.1"
    chmod 0755 "$dir/usr/local/lib" "$dir/usr/local/lib/fakegpu"
  fi
  chmod 0755 "$dir" "$dir/usr" "$dir/usr/local" "$dir/usr/local/bin"
}

# The user an image runs as when the pod does not say: the node agent writes into the kubelet's
# root-owned directories; the others need no privilege (the bundle's Deployments say the same).
user_of() { [[ $1 == fakegpu-node-agent ]] && echo 0:0 || echo 65532:65532; }

archives() {
  local image ref work digest
  mkdir -p "$out"
  for image in "${images[@]}"; do
    [[ -x $bins/$image ]] || die "$bins/$image is not built: run $0"
    [[ $image != fakegpu-node-agent || -f $nvml_library ]] || die "$nvml_library is not built: run $0"
    [[ $image != fakegpu-node-agent || -f $cuda_library ]] || die "$cuda_library is not built: run $0"
    ref=$(ref_of "$image")
    work=$(mktemp -d)
    rootfs_of "$image" "$work"
    digest=$(oci_image_archive "$out/$image.tar" "$ref" "$(user_of "$image")" "$work" "/usr/local/bin/$image")
    rm -rf "$work"
    printf '%s\t%s\t%s\n' "$ref" "$digest" "$out/$image.tar"
  done
}

# Copies each archive to <registry>, keeping the bundle's path and tag (ghcr.io/fakegpu/x:v1 ->
# <registry>/fakegpu/x:v1): a registry mirror for ghcr.io, or an `images:` override, then
# serves the bundle unchanged. Layers go as they are (uncompressed; skopeo would gzip them by
# default), so the pushed digest is the archive's and reproducible.
push() { # <registry>
  local registry=${1:?usage: $0 push REGISTRY} image ref dest
  command -v skopeo >/dev/null || die "skopeo not found: apt-get install skopeo"
  for image in "${images[@]}"; do
    [[ -f $out/$image.tar ]] || die "$out/$image.tar is not written: run $0"
    ref=$(ref_of "$image")
    dest=$registry/${ref#*/}
    skopeo copy --quiet --preserve-digests --dest-tls-verify="${FAKEGPU_REGISTRY_TLS_VERIFY:-true}" \
      "oci-archive:$out/$image.tar" "docker://$dest" >&2
    printf '%s\t%s\n' "$dest" "$(skopeo inspect --tls-verify="${FAKEGPU_REGISTRY_TLS_VERIFY:-true}" \
      --format '{{.Digest}}' "docker://$dest")"
  done
}

case ${1:-all} in
  all) build && archives ;;
  archives) archives ;;
  refs) for image in "${images[@]}"; do ref_of "$image"; done ;;
  push) push "${2:-}" ;;
  *) echo "usage: $0 [all|archives|refs|push REGISTRY]" >&2; exit 2 ;;
esac
