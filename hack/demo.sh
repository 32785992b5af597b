#!/usr/bin/env bash
# The main job on a laptop-sized default: build, start the local control plane, install the
# CRDs, create KWOK nodes for each sample pool, apply the samples, and show what a user sees.
# The cluster keeps running; `hack/cluster.sh down` stops it.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
nodes_per_pool=${FAKEGPU_DEMO_NODES:-2}

eval "$(hack/cluster.sh up)"
kubectl=target/hack-bin/kubectl

echo "==> installing CRDs"
$kubectl apply --server-side --field-manager=fakegpu -f config/crd/ >/dev/null
$kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
echo "    (the operator that reconciles pools is not part of this build yet)"

echo "==> creating $nodes_per_pool KWOK nodes per sample pool"
for sample in config/samples/*.yaml; do
  pool=$($kubectl create --dry-run=client -o jsonpath='{.metadata.name}' -f "$sample")
  for i in $(seq 0 $((nodes_per_pool - 1))); do
    hack/cluster.sh add-node "$pool-$i" "run.ai/simulated-gpu-node-pool=$pool"
  done
done

echo "==> applying sample pools"
$kubectl apply --server-side --field-manager=fakegpu -f config/samples/

echo
echo "\$ kubectl get gpunodepools"
$kubectl get gpunodepools
echo
echo "\$ kubectl get nodes -L run.ai/simulated-gpu-node-pool,type"
$kubectl get nodes -L run.ai/simulated-gpu-node-pool,type
echo
echo "Use the cluster:"
hack/cluster.sh env
echo "Stop it: hack/cluster.sh down"
