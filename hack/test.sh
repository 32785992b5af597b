#!/usr/bin/env bash
# The whole test suite: formatting, clippy, unit tests, then the e2e tests against a fresh local
# control plane (hack/cluster.sh) that is stopped again afterwards. Exits non-zero on any failure.
#
# The test cluster uses its own state directory and ports, so a demo cluster (hack/demo.sh) can
# keep running beside it.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "unit tests"
cargo test --locked

step "local control plane for e2e"
export FAKEGPU_CLUSTER_DIR=$repo/.cache/cluster-test
export FAKEGPU_ETCD_PORT=12379 FAKEGPU_ETCD_PEER_PORT=12380 FAKEGPU_APISERVER_PORT=16443
export FAKEGPU_KCM_PORT=20257 FAKEGPU_SCHEDULER_PORT=20259 FAKEGPU_KWOK_PORT=20247
export FAKEGPU_HTTP_ADDR=127.0.0.1:28080
hack/cluster.sh down >/dev/null 2>&1 || true
rm -rf "$FAKEGPU_CLUSTER_DIR"
trap 'hack/operator.sh stop >/dev/null 2>&1 || true; hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
eval "$(hack/cluster.sh up)"

step "operator from the install bundle (its ServiceAccount, its RBAC)"
hack/operator.sh start

step "e2e tests (KUBECONFIG=$KUBECONFIG)"
# The exporter e2e runs the binary itself.
cargo build --locked -p fakegpu-exporter -p fakegpu-node-agent
# --nocapture: the idempotence test prints the measured writes per node.
cargo test --locked -p fakegpu-e2e -- --nocapture

step "node agent driven by the kubelet's own device manager code (hack/kubelet-harness)"
cargo build --locked -p fakegpu-node-agent
# The agent runs with the bundle's node-agent ServiceAccount, so a missing RBAC rule fails.
FAKEGPU_AGENT_KUBECONFIG=$(hack/operator.sh kubeconfig fakegpu-node-agent) \
  FAKEGPU_NODE_AGENT=$repo/target/debug/fakegpu-node-agent \
  go -C hack/kubelet-harness test ./... -count=1 -v
