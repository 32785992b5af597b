#!/usr/bin/env bash
# Node write benchmark: what one node write of fakegpu's costs kube-apiserver, as the
# server-side apply fakegpu sent before 2026-12-05 and as the strategic merge patch it sends now
# (e2e/src/bin/node_writes.rs says how). A fresh local control plane of its own (the scale
# benchmark's directory and ports), no operator: the driver sends the operator's bodies itself.
#
#   hack/bench/node-writes.sh                      8 000 nodes, blocks apply,patch,patch,apply
#   hack/bench/node-writes.sh --nodes 4000 --blocks patch,apply --concurrency 16
#
# Not a test: nothing is asserted. Prints a Markdown table.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
# shellcheck source=hack/lib/bench-cluster.sh
source "$repo/hack/lib/bench-cluster.sh"
trap 'hack/cluster.sh down >/dev/null 2>&1 || true' EXIT

hack/cluster.sh build
cargo build --quiet --release -p fakegpu-e2e --bin node_writes
hack/cluster.sh down >/dev/null 2>&1 || true
rm -rf "$FAKEGPU_CLUSTER_DIR"
eval "$(hack/cluster.sh up)"
echo "$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: hack/bench/node-writes.sh $*" >&2
target/release/node_writes "$@"
