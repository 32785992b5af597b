#!/usr/bin/env bash
# What GPU containers load, built from scratch: for each commit named, the release build of the
# NVML library, the CUDA library and nvidia-smi, each alone in an empty target directory (so
# each counts every crate it needs), with the time, the crates compiled and the file's size.
# Commits before nvidia-smi had a crate of its own build it from the node agent's.
#
#   hack/bench/container-builds.sh [COMMIT ...]     default: HEAD
#
# Not a test: nothing is asserted. Needs no cluster; takes minutes per commit on 2 cores, so run
# it on an otherwise idle machine. Results land in .cache/bench/container-builds.md as well.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
[[ $# -gt 0 ]] || set -- HEAD
results=$repo/.cache/bench/container-builds.md
mkdir -p "$(dirname "$results")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

{
  echo "| commit | what | seconds | crates compiled | file | bytes |"
  echo "|---|---|---|---|---|---|"
} | tee "$results"
for commit in "$@"; do
  short=$(git rev-parse --short "$commit")
  source_dir=$scratch/$short
  mkdir -p "$source_dir"
  git archive "$commit" | tar -x -C "$source_dir"
  if [[ -f $source_dir/smi/Cargo.toml ]]; then
    smi_args="-p fakegpu-smi --bin nvidia-smi"
  else
    smi_args="-p fakegpu-node-agent --bin nvidia-smi"
  fi
  for what in "NVML library:libnvidia_ml.so:-p fakegpu-nvml" \
    "CUDA library:libcuda.so:-p fakegpu-cuda" \
    "nvidia-smi:nvidia-smi:$smi_args"; do
    IFS=: read -r name file args <<<"$what"
    target=$scratch/target-$short-$file
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # args are cargo's words
    (cd "$source_dir" && CARGO_TARGET_DIR=$target cargo build --locked --release $args \
      >"$target.log" 2>&1) || { cat "$target.log" >&2; exit 1; }
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    crates=$(grep -c '^ *Compiling ' "$target.log")
    bytes=$(stat -c %s "$target/release/$file")
    printf '| %s | %s | %.0f | %s | %s | %s |\n' "$short" "$name" "$seconds" "$crates" "$file" "$bytes"
  done | tee -a "$results"
done
