#!/usr/bin/env bash
# A release a user installs with one command:
#
#   hack/release.sh VERSION REGISTRY [OUT]
#
#   VERSION   v<the workspace's version> (Cargo.toml): the images' tag, which the bundle names
#   REGISTRY  where the images go (ghcr.io; the test suite's registry on loopback); they keep the
#             bundle's path below it: REGISTRY/fakegpu/<image>:VERSION
#   OUT       the release's files (default target/release/VERSION)
#
# Builds the images (hack/images.sh), pushes them (skopeo, digests as built), and writes to OUT:
#
#   install.yaml           the whole bundle (config/, as `kubectl kustomize` renders it) in one
#                          file, CRDs first, every image pinned by its digest:
#                          kubectl apply --server-side -f install.yaml
#   sbom/<name>.cdx.json   a CycloneDX 1.5 SBOM of each shipped binary and library: the crates
#                          it is built from (cargo-cyclonedx, from crates.io, built once per
#                          machine)
#   images.txt             each pushed image with its digest
#   SHA256SUMS             the checksums of the files above
#
# FAKEGPU_REGISTRY_TLS_VERIFY=false pushes to a plain-HTTP registry. The workflow
# .github/workflows/release.yml runs this on a version tag.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bin=${FAKEGPU_BIN_DIR:-$repo/target/hack-bin}
cyclonedx_version=0.5.9
target=x86_64-unknown-linux-musl

# shellcheck source=hack/lib/prerequisites.sh
source "$repo/hack/lib/prerequisites.sh"

log() { printf '[release] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

version=${1:-}
registry=${2:-}
[[ -n $version && -n $registry ]] || die "usage: $0 VERSION REGISTRY [OUT]"
workspace_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[[ $version == "v$workspace_version" ]] ||
  die "VERSION $version is not the workspace's v$workspace_version: set [workspace.package] version in Cargo.toml first"
registry=${registry%/}
out=${3:-$repo/target/release/$version}

# kubectl renders the bundle; the local control plane's build makes it when there is none.
kubectl=$bin/kubectl
if [[ ! -x $kubectl ]]; then
  if command -v kubectl >/dev/null; then kubectl=$(command -v kubectl); else "$repo/hack/cluster.sh" build; fi
fi

rm -rf "$out"
mkdir -p "$out/sbom"

log "images for $version (hack/images.sh)"
"$repo/hack/images.sh" >/dev/null
log "pushing them to $registry"
"$repo/hack/images.sh" push "$registry" >"$out/images.txt"
cat "$out/images.txt" >&2

# install.yaml: each image the bundle names becomes the pushed one, tag and digest; an image
# left unpinned, or a document of another kind before the CRDs, fails the release.
log "install.yaml"
pins=()
while IFS=$'\t' read -r pushed digest; do
  [[ $digest == sha256:* ]] || die "no digest for $pushed: $digest"
  image=${pushed##*/}
  image=${image%%:*}
  ref=$("$repo/hack/images.sh" refs | grep "/$image:")
  pins+=(-e "s|image: *$ref\$|image: $pushed@$digest|")
done <"$out/images.txt"
{
  echo "# fakegpu $version: kubectl apply --server-side -f install.yaml"
  echo "# Images pinned by digest; uninstall: kubectl delete -f install.yaml"
  "$kubectl" kustomize "$repo/config" | sed "${pins[@]}"
} >"$out/install.yaml"
unpinned=$(grep -E '^\s*(- )?image:' "$out/install.yaml" | grep -v '@sha256:' || true)
[[ -z $unpinned ]] || die "images left unpinned in install.yaml: $unpinned"
kinds=$(awk '/^kind: / { print $2 }' "$out/install.yaml")
last_crd=$(grep -n '^CustomResourceDefinition$' <<<"$kinds" | tail -n1 | cut -d: -f1)
first_other=$(grep -nvE '^(Namespace|CustomResourceDefinition)$' <<<"$kinds" | head -n1 | cut -d: -f1)
[[ -n $last_crd && -n $first_other && $last_crd -lt $first_other ]] ||
  die "install.yaml does not put the CRDs first (kinds in order: $(tr '\n' ' ' <<<"$kinds"))"

# SBOMs: the crates each shipped binary and library is built from, for the target it is built
# for. cargo-cyclonedx writes one document per binary of every workspace member beside its
# Cargo.toml: the shipped ones are moved into the release, the rest removed.
prerequisites_cargo_tool cargo-cyclonedx "$cyclonedx_version" "the release's SBOMs"
members=$(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json, os, sys; print("\n".join(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"]))')
sboms() { # <target> <document>:<release name>...
  local target=$1 entry
  shift
  cargo cyclonedx --format json --describe binaries --target "$target" \
    --spec-version 1.5 --no-build-deps -q >&2
  for entry in "$@"; do
    [[ -f $repo/${entry%%:*} ]] || die "cargo-cyclonedx wrote no ${entry%%:*}"
    mv "$repo/${entry%%:*}" "$out/sbom/${entry#*:}.cdx.json"
  done
  local member
  while IFS= read -r member; do
    find "$member" -maxdepth 1 -name '*.cdx.json' -delete
  done <<<"$members"
}
log "SBOMs (CycloneDX 1.5)"
sboms "$target" operator/fakegpu-operator_bin.cdx.json:fakegpu-operator \
  exporter/fakegpu-exporter_bin.cdx.json:fakegpu-exporter \
  node-agent/fakegpu-node-agent_bin.cdx.json:fakegpu-node-agent \
  smi/nvidia-smi_bin.cdx.json:nvidia-smi
# The NVML and CUDA libraries are built for glibc (hack/lib/zigbuild.sh).
sboms x86_64-unknown-linux-gnu nvml/nvidia_ml_cdylib-rlib.cdx.json:libnvidia-ml \
  cuda/cuda_cdylib-rlib.cdx.json:libcuda

(cd "$out" && sha256sum install.yaml images.txt sbom/*.cdx.json >SHA256SUMS)
log "released $version to $out:"
(cd "$out" && find . -type f | sort | sed 's|^\./|  |') >&2
echo "$out"
