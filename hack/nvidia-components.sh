#!/usr/bin/env bash
# Builds NVIDIA's own GPU feature discovery and device plugin (github.com/NVIDIA/k8s-device-plugin)
# and container toolkit CLI and CDI hooks (nvidia-ctk, nvidia-cdi-hook,
# github.com/NVIDIA/nvidia-container-toolkit), fetched
# from the Go module proxy at build time, never committed, into target/hack-bin/nvidia/, for
# the real-node tests that run them against the driver root a `backend: mock` pool lays out.
# Prints the directory.
#
#   hack/nvidia-components.sh
#
# One change to NVIDIA's tree, made in a scratch copy: its node-feature-discovery release
# (v0.15.7) is not on the proxy this project may use, so its two imports move to v0.16.6's
# locations (the same packages, moved). They serve only `--use-node-feature-api`; the test
# writes GFD's labels to a file.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=v0.17.4
nfd=v0.16.6
toolkit=v1.20.2
out=$repo/target/hack-bin/nvidia
work=$repo/target/hack-build/k8s-device-plugin-$version

log() { printf '[nvidia] %s\n' "$*" >&2; }

export GOFLAGS=-mod=mod
if [[ ! -x $out/nvidia-ctk || ! -x $out/nvidia-cdi-hook ||
  $(cat "$out/.toolkit-version" 2>/dev/null) != "$toolkit" ]]; then
  log "building nvidia-ctk and nvidia-cdi-hook $toolkit (about a minute)"
  mkdir -p "$out"
  (cd /tmp && GOBIN=$out go install "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$toolkit" \
    "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$toolkit" >&2)
  echo "$toolkit" >"$out/.toolkit-version"
fi
if [[ -x $out/gpu-feature-discovery && -x $out/nvidia-device-plugin && -f $out/.version &&
  $(<"$out/.version") == "$version" ]]; then
  echo "$out"
  exit 0
fi
source=$(go mod download -json "github.com/NVIDIA/k8s-device-plugin@$version" |
  sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $source ]] || { log "error: cannot fetch github.com/NVIDIA/k8s-device-plugin@$version"; exit 1; }
rm -rf "$work"
mkdir -p "$(dirname "$work")" "$out"
cp -r "$source" "$work"
chmod -R u+w "$work"
# The module's vendor/ is incomplete as served (modules.txt only): build from the module cache.
rm -rf "$work/vendor"
sed -i \
  -e 's#sigs.k8s.io/node-feature-discovery/pkg/generated/clientset/versioned#sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned#' \
  -e 's#sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/v1alpha1#sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1#' \
  "$work/internal/flags/kubeclient.go" "$work/internal/lm/output.go"
go -C "$work" mod edit -droprequire sigs.k8s.io/node-feature-discovery
go -C "$work" get "sigs.k8s.io/node-feature-discovery@$nfd" "sigs.k8s.io/node-feature-discovery/api/nfd@$nfd" >&2
log "building gpu-feature-discovery and nvidia-device-plugin $version (a minute or two)"
go -C "$work" build -o "$out/" ./cmd/gpu-feature-discovery ./cmd/nvidia-device-plugin >&2
echo "$version" >"$out/.version"
echo "$out"
