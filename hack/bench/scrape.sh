#!/usr/bin/env bash
# Scrape benchmark: for each node count, a fresh local control plane, N topology ConfigMaps of
# 8 H100s each (half held by pods with a utilization range), the release exporter run as its
# ServiceAccount, and sequential /metrics scrapes over HTTP (driver: e2e/src/bin/scrape.rs).
#
#   hack/bench/scrape.sh [NODES ...]        default: 1000
#   FAKEGPU_BENCH_SCRAPES=100 hack/bench/scrape.sh 1000 5000
#   FAKEGPU_EXPORTER_BIN=target/x86_64-unknown-linux-musl/release/fakegpu-exporter \
#     hack/bench/scrape.sh 5000                # another build of the exporter (the image's)
#
# Not a test: nothing is asserted. Results land in .cache/bench/scrape.md as well.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000)
scrapes=${FAKEGPU_BENCH_SCRAPES:-50}

# shellcheck source=hack/lib/bench-cluster.sh
source "$repo/hack/lib/bench-cluster.sh"
results=$repo/.cache/bench/scrape.md
mkdir -p "$(dirname "$results")"

cleanup() { hack/cluster.sh down >/dev/null 2>&1 || true; }
trap cleanup EXIT

hack/cluster.sh build
cargo build --quiet --release -p fakegpu-exporter -p fakegpu-e2e --bin fakegpu-exporter --bin scrape

{
  echo "$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: hack/bench/scrape.sh ${sizes[*]} (scrapes=$scrapes)"
  echo
  echo "| nodes | GPUs | scrapes | p50 ms | p90 ms | p99 ms | max ms | body MiB | exporter peak RSS MiB | exporter CPU s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$results"
for n in "${sizes[@]}"; do
  cleanup
  rm -rf "$FAKEGPU_CLUSTER_DIR"
  eval "$(hack/cluster.sh up)"
  # The bundle's namespace, CRDs and RBAC; the operator is not needed (documents are written
  # directly) and is not started.
  hack/operator.sh install
  echo "==> $n nodes x 8 GPUs, $scrapes scrapes" >&2
  target/release/scrape "$n" "$scrapes" | tee -a "$results"
done
echo
cat "$results"
