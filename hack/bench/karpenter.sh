#!/usr/bin/env bash
# Karpenter benchmark: on a fresh local control plane with fakegpu's operator (its bundle's
# RBAC) and Karpenter's KWOK provider (hack/karpenter.sh), the time from creating N pending
# pods to all of them bound, for pods of one GPU on nodes Karpenter launches into a fakegpu
# pool (8 GPUs a node), against as many CPU-only pods on CPU nodes, in one run
# (driver: e2e/tests/karpenter.rs, karpenter_bench_pending_to_bound).
#
#   hack/bench/karpenter.sh [PODS]     default: 100
#
# Not a test: nothing is asserted. Results land in .cache/bench/karpenter.md as well.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
pods=${1:-100}

# shellcheck source=hack/lib/bench-cluster.sh
source "$repo/hack/lib/bench-cluster.sh"
results=$repo/.cache/bench/karpenter.md
mkdir -p "$(dirname "$results")"

cleanup() {
  hack/karpenter.sh stop >/dev/null 2>&1 || true
  hack/operator.sh stop >/dev/null 2>&1 || true
  hack/cluster.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT

cleanup
rm -rf "$FAKEGPU_CLUSTER_DIR"
eval "$(hack/cluster.sh up)"
hack/operator.sh start
hack/karpenter.sh start
echo "$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: hack/bench/karpenter.sh $pods" >"$results"
echo >>"$results"
FAKEGPU_BENCH_PODS=$pods cargo test --quiet --locked -p fakegpu-e2e --test karpenter -- --ignored \
  --exact karpenter_bench_pending_to_bound --nocapture | grep '^|' | tee -a "$results"
