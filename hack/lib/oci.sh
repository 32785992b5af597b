# shellcheck shell=bash
# Writes OCI image archives with tar and sha256sum alone: no Docker, no registry, no daemon.
# Sourced by hack/images.sh (fakegpu's images) and hack/node.sh (the node's pause image).
#
# An archive holds one single-layer linux/amd64 image in two forms at once, so every loader
# takes it: the OCI image layout (oci-layout, index.json, blobs/) that `ctr images import`,
# `kind load image-archive`, `skopeo copy oci-archive:...` and `podman load` read, and Docker's
# manifest.json that `docker load` reads. The layer is an uncompressed tar, so its digest is
# also its diff_id and the blob Docker's manifest names.
#
# Reproducible: entries sorted, mtime 0, owner 0:0, no creation time in the config. The same
# files give the same bytes, hence the same image digest.

# tar options that make an archive depend only on the files' names, contents and modes.
oci_tar() { # <out.tar> <dir> : every entry under <dir>, relative to it
  local out=$1 dir=$2
  local -a entries
  mapfile -t entries < <(cd "$dir" && LC_ALL=C ls -A)
  LC_ALL=C tar --create --file="$out" --directory="$dir" --format=gnu --sort=name \
    --mtime=@0 --owner=0 --group=0 --numeric-owner "${entries[@]}"
}

oci_digest() { sha256sum "$1" | cut -d' ' -f1; }

# Moves <file> into <layout>/blobs/sha256/<digest> and prints the digest (hex).
oci_blob() { # <layout> <file>
  local digest
  digest=$(oci_digest "$2")
  mv "$2" "$1/blobs/sha256/$digest"
  echo "$digest"
}

oci_size() { stat -c %s "$1"; }

# JSON string list from arguments: "a" "b" -> ["a","b"] (arguments hold no quotes or backslashes).
oci_json_list() {
  local first=1 item
  printf '['
  for item in "$@"; do
    ((first)) || printf ','
    printf '"%s"' "$item"
    first=0
  done
  printf ']'
}

# oci_image_archive <out.tar> <reference> <user> <rootfs dir> <entrypoint...>
#   reference: registry/name:tag, as the install bundle names the image
#   user:      uid:gid the image runs as unless the pod says otherwise
oci_image_archive() {
  local out=$1 ref=$2 user=$3 rootfs=$4
  shift 4
  local work tag=${ref##*:}
  work=$(mktemp -d)
  mkdir -p "$work/layout/blobs/sha256"
  local layout=$work/layout

  oci_tar "$work/layer.tar" "$rootfs"
  local layer_size layer
  layer_size=$(oci_size "$work/layer.tar")
  layer=$(oci_blob "$layout" "$work/layer.tar")

  printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":{"User":"%s","Entrypoint":%s,"Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"WorkingDir":"/","Labels":{"org.opencontainers.image.title":"%s","org.opencontainers.image.version":"%s"}},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"hack/images.sh"}]}' \
    "$user" "$(oci_json_list "$@")" "${ref%:*}" "$tag" "$layer" >"$work/config.json"
  local config_size config
  config_size=$(oci_size "$work/config.json")
  config=$(oci_blob "$layout" "$work/config.json")

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$config_size" "$layer" "$layer_size" >"$work/manifest.json"
  local manifest_size manifest
  manifest_size=$(oci_size "$work/manifest.json")
  manifest=$(oci_blob "$layout" "$work/manifest.json")

  # io.containerd.image.name names the image on `ctr import` (and so in kind); ref.name is
  # the tag, as `docker save` writes it, which skopeo and podman read.
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$manifest_size" "$ref" "$tag" >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  printf '[{"Config":"blobs/sha256/%s","RepoTags":["%s"],"Layers":["blobs/sha256/%s"]}]' \
    "$config" "$ref" "$layer" >"$layout/manifest.json"

  oci_tar "$out" "$layout"
  rm -rf "$work"
  # The image's digest: what `ctr images ls`, `skopeo inspect` and a registry report.
  echo "sha256:$manifest"
}
