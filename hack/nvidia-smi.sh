#!/usr/bin/env bash
# Fetches NVIDIA's own nvidia-smi binaries from Debian's package archive (component non-free:
# bookworm's 535.261.03, trixie's 550.163.01) into target/hack-bin/nvidia-smi/<version>/,
# for the test that runs them against fakegpu's NVML library. NVIDIA-licensed: fetched at
# test time, never committed. Prints the folder.
#
#   hack/nvidia-smi.sh
#
# FAKEGPU_DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/debian.sh
source "$repo/hack/lib/debian.sh"
out=$repo/target/hack-bin/nvidia-smi

log() { printf '[nvidia-smi] %s\n' "$*" >&2; }

# suite version: the binary's driver version must be the document's (it checks).
for pair in bookworm:535.261.03 trixie:550.163.01; do
  suite=${pair%%:*} version=${pair#*:}
  [[ -x $out/$version/nvidia-smi ]] && continue
  log "fetching nvidia-smi $version from $suite non-free"
  scratch=$(mktemp -d)
  debian_unpack "$suite" non-free nvidia-smi "$version" "$scratch" || { rm -rf "$scratch"; exit 1; }
  mkdir -p "$out/$version"
  install -m 0755 "$scratch/usr/lib/nvidia/current/nvidia-smi" "$out/$version/nvidia-smi"
  rm -rf "$scratch"
done
echo "$out"
