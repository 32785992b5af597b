#!/usr/bin/env bash
# Create cost benchmark: what one create of the objects fakegpu writes per node costs
# kube-apiserver in CPU (a topology ConfigMap; a GPU ResourceSlice, for pools serving DRA), with
# the JSON body the operator sends and with a protobuf body, which the API server also accepts
# for built-in kinds (hack/bench/create-cost/main.go says how). A fresh local control plane of
# its own (the scale benchmark's directory and ports); the samples are the operator's own: it
# runs until it has written them for one KWOK node of an 8 × H100 pool serving DRA, then stops.
#
#   hack/bench/create-cost.sh                       2 000 of each, blocks json,protobuf,protobuf,json
#   hack/bench/create-cost.sh -n 4000 -blocks protobuf,json -concurrency 16
#
# Not a test: nothing is asserted. Prints a Markdown table.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
# shellcheck source=hack/lib/bench-cluster.sh
source "$repo/hack/lib/bench-cluster.sh"
kubectl=$repo/target/hack-bin/kubectl
trap 'hack/operator.sh stop >/dev/null 2>&1 || true; hack/cluster.sh down >/dev/null 2>&1 || true' EXIT

hack/cluster.sh build
# The packages scale.sh builds, so both share one operator build (features unify by package).
cargo build --quiet --release -p fakegpu-operator -p fakegpu-e2e --bin fakegpu-operator
go -C hack/bench/create-cost build -o "$repo/target/hack-bin/create-cost" .
hack/cluster.sh down >/dev/null 2>&1 || true
rm -rf "$FAKEGPU_CLUSTER_DIR"
eval "$(hack/cluster.sh up)"
hack/bench/impl/fakegpu.sh start >&2

samples=$FAKEGPU_CLUSTER_DIR/samples
mkdir -p "$samples"
printf 'create-cost\t8\th100\tNVIDIA-H100-80GB-HBM3\t81559\ttrue\n' >"$samples/layout"
hack/bench/impl/fakegpu.sh pools "$samples/layout"
"$kubectl" create -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: create-cost
  labels: {type: kwok, run.ai/simulated-gpu-node-pool: create-cost}
  annotations: {kwok.x-k8s.io/node: fake}
spec:
  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
YAML
for _ in $(seq 120); do
  "$kubectl" get -n fakegpu-system configmap/topology-create-cost -o json >"$samples/configmap.json" 2>/dev/null &&
    "$kubectl" get resourceslice/kwok-create-cost-gpu -o json >"$samples/slice.json" 2>/dev/null &&
    break
  sleep 1
done
[[ -s $samples/slice.json ]] || { echo "the operator wrote no ResourceSlice in 2 minutes" >&2; exit 1; }
hack/operator.sh stop >&2
"$kubectl" create namespace create-cost >/dev/null
echo "$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: hack/bench/create-cost.sh $*" >&2
target/hack-bin/create-cost -configmap "$samples/configmap.json" -slice "$samples/slice.json" \
  -namespace create-cost "$@"
