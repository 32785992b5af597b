#!/usr/bin/env bash
# Unpacks an older distribution's glibc (Debian 11's 2.31, the glibc of Ubuntu 20.04 and of the
# CUDA images built on it) into target/hack-bin/glibc/<version>/: its runtime (libc6), to run
# programs under it as a GPU container of such an image would, and its development files
# (libc6-dev, linux-libc-dev), to build programs against it (a sysroot for gcc). Two users: the
# test that runs NVIDIA's nvidia-smi with fakegpu's shipped NVML library under it, and the NVML
# probe image of the real node's e2e (hack/node.sh). Prints the folder; the loader and the
# libraries are in its lib/x86_64-linux-gnu.
#
#   hack/glibc-root.sh
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/debian.sh
source "$repo/hack/lib/debian.sh"
suite=bullseye version=2.31
out=$repo/target/hack-bin/glibc/$version

if [[ ! -f $out/.complete ]]; then
  printf '[glibc-root] fetching libc6, libc6-dev %s and linux-libc-dev from %s\n' "$version" "$suite" >&2
  rm -rf "$out"
  debian_unpack "$suite" main libc6 "$version-" "$out"
  debian_unpack "$suite" main libc6-dev "$version-" "$out"
  debian_unpack "$suite" main linux-libc-dev "" "$out"
  # The packages' links are absolute (/lib/x86_64-linux-gnu/...): inside this folder they would
  # name this machine's files, whose glibc is another. Made relative, they stay in the folder.
  find "$out" -type l -lname '/*' -print0 | while IFS= read -r -d '' link; do
    ln -sfnr "$out$(readlink "$link")" "$link"
  done
  touch "$out/.complete"
fi
echo "$out"
