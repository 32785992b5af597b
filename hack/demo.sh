#!/usr/bin/env bash
# The main job on a laptop-sized default: build, start the local control plane, install the
# bundle (CRDs, RBAC, namespace) and run the operator with its ServiceAccount, create KWOK nodes
# for each sample pool, apply the samples, run the examples, start the GPU metrics exporter,
# partition one node's GPU as Run:ai's dynamic MIG does, and show what a user sees; then, where
# the machine allows (Linux, root), build the images, add a real kubelet node, run the bundle
# in-cluster and `kubectl exec` nvidia-smi in a real container. Everything keeps running; the
# last lines say what to try next and how to stop it.
#
# What it needs from the machine is checked first (hack/lib/prerequisites.sh) and installed where
# it can be (root on Debian or Ubuntu); where it cannot, it says so at once, and what it skips.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=hack/lib/prerequisites.sh
source "$repo/hack/lib/prerequisites.sh"
nodes_per_pool=${FAKEGPU_DEMO_NODES:-2}
# The host exporter for the KWOK half, on loopback; the real node's in-cluster exporter is on
# the pod network behind its Service.
exporter_addr=${FAKEGPU_EXPORTER_ADDR:-127.0.0.1:19410}

echo "==> what the demo needs (hack/lib/prerequisites.sh)"
prerequisites demo || exit 1

eval "$(hack/cluster.sh up)"
kubectl=target/hack-bin/kubectl

echo "==> installing the bundle and starting the operator"
hack/operator.sh start

echo "==> creating $nodes_per_pool KWOK nodes per sample pool"
for sample in config/samples/*.yaml; do
  pool=$($kubectl create --dry-run=client -o jsonpath='{.metadata.name}' -f "$sample")
  for i in $(seq 0 $((nodes_per_pool - 1))); do
    hack/cluster.sh add-node "$pool-$i" "run.ai/simulated-gpu-node-pool=$pool"
  done
done

echo "==> applying sample pools"
$kubectl apply --server-side --field-manager=fakegpu-demo -f config/samples/
$kubectl wait gpunodepools --all --for=condition=Ready --timeout=60s >/dev/null

show() { echo; echo "\$ kubectl $*"; $kubectl "$@"; }
show get gpunodepools
show get nodes -L fakegpu.dev/pool,nvidia.com/gpu.product,nvidia.com/gpu.count,nvidia.com/gpu.memory,nvidia.com/gpu.family
show get nodes -l fakegpu.dev/pool -o 'custom-columns=NODE:.metadata.name,POOL:.metadata.labels.fakegpu\.dev/pool,GPU:.status.allocatable.nvidia\.com/gpu,FRACTIONING:.status.conditions[?(@.type=="gpu-fractioning.nvidia.com/Ready")].status'
show get configmaps -n fakegpu-system -l node-topology=true
show get deviceclasses -L app.kubernetes.io/managed-by
show get resourceslices

echo; echo "==> running the example workloads (examples/) in namespace demo"
$kubectl create namespace demo --dry-run=client -o yaml | $kubectl apply -f - >/dev/null
$kubectl apply -n demo -f examples/ >/dev/null
$kubectl wait -n demo pods --all --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null
show get pods -n demo -o wide
show get resourceclaims -n demo
show get computedomains -n demo -o 'custom-columns=NAME:.metadata.name,NODES:.spec.numNodes,STATUS:.status.status,ON:.status.nodes[*].name'
# The operator records the holders a moment after the pods run.
sleep 2
show get gpunodepools
node=$($kubectl get nodes -l fakegpu.dev/pool=a100-numa -o jsonpath='{.items[0].metadata.name}')
echo; echo "\$ kubectl get configmap -n fakegpu-system topology-$node -o jsonpath='{.data.topology\\.yml}' | head -20"
$kubectl get configmap -n fakegpu-system "topology-$node" -o jsonpath='{.data.topology\.yml}' | head -20

echo; echo "==> GPU metrics: fakegpu-exporter on $exporter_addr, as its ServiceAccount"
[[ -x target/debug/fakegpu-exporter ]] || echo "building fakegpu-exporter (the first build takes 1-3 minutes)"
cargo build --quiet -p fakegpu-exporter
exporter_kubeconfig=$(hack/operator.sh kubeconfig fakegpu-exporter)
state=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
if [[ -f $state/run/exporter.pid ]]; then kill "$(cat "$state/run/exporter.pid")" 2>/dev/null || true; fi
KUBECONFIG=$exporter_kubeconfig FAKEGPU_NAMESPACE=fakegpu-system FAKEGPU_EXPORTER_ADDR=$exporter_addr \
  setsid target/debug/fakegpu-exporter >>"$state/logs/exporter.log" 2>&1 </dev/null &
echo $! >"$state/run/exporter.pid"
for _ in $(seq 1 100); do
  curl -sf "http://$exporter_addr/metrics" 2>/dev/null | grep -q 'pod="gpu-pod"' && break
  sleep 0.2
done
echo "\$ curl -s $exporter_addr/metrics | grep '^DCGM_FI_DEV_GPU_UTIL' | grep -v 'pod=\"\"'"
curl -s "http://$exporter_addr/metrics" | grep '^DCGM_FI_DEV_GPU_UTIL' | grep -v 'pod=""' || true

# What `nvidia-smi` prints inside gpu-pod: the device plugin would inject these variables; KWOK
# runs no container, so the demo runs the fake nvidia-smi on the host with them.
cargo build --quiet -p fakegpu-smi
gpu_pod_node=$($kubectl get pod -n demo gpu-pod -o jsonpath='{.spec.nodeName}')
gpu_pod_gpu=$(curl -s "http://$exporter_addr/metrics" | grep '^DCGM_FI_DEV_GPU_UTIL' | grep 'pod="gpu-pod"' \
  | sed -n 's/.*UUID="\([^"]*\)".*/\1/p' | head -n 1)
echo; echo "\$ nvidia-smi   # in gpu-pod: NODE_NAME=$gpu_pod_node NVIDIA_VISIBLE_DEVICES=$gpu_pod_gpu"
NODE_NAME=$gpu_pod_node NVIDIA_VISIBLE_DEVICES=$gpu_pod_gpu HOSTNAME=gpu-pod \
  FAKEGPU_EXPORTER_URL=http://$exporter_addr target/debug/nvidia-smi || true
echo; echo "==> Run:ai's dynamic MIG: partitioning GPU 7 of one H100 node"
mig_node=$($kubectl get nodes -l fakegpu.dev/pool=h100-kwok -o jsonpath='{.items[-1:].metadata.name}')
$kubectl label node "$mig_node" --overwrite node-role.kubernetes.io/runai-dynamic-mig=true >/dev/null
mig_config='version: v1
mig-configs:
  selected:
  - devices: ["7"]
    mig-enabled: true
    mig-devices:
    - {name: 1g.10gb, position: 0, size: 1}
    - {name: 3g.40gb, position: 4, size: 4}'
echo "\$ kubectl annotate node $mig_node run.ai/mig.config='<GPU 7: 1g.10gb at 0, 3g.40gb at 4>'"
$kubectl annotate node "$mig_node" --overwrite "run.ai/mig.config=$mig_config" >/dev/null
$kubectl wait node "$mig_node" --timeout=30s \
  --for=jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}'=success >/dev/null
show get node "$mig_node" -o 'custom-columns=NODE:.metadata.name,STATE:.metadata.labels.nvidia\.com/mig\.config\.state,STRATEGY:.metadata.labels.nvidia\.com/mig\.strategy,GPU:.status.allocatable.nvidia\.com/gpu,MIG-1G:.status.allocatable.nvidia\.com/mig-1g\.10gb,MIG-3G:.status.allocatable.nvidia\.com/mig-3g\.40gb'
echo; echo "\$ kubectl get node $mig_node -o jsonpath='{.metadata.annotations.run\.ai/mig-mapping}' | base64 -d"
$kubectl get node "$mig_node" -o jsonpath='{.metadata.annotations.run\.ai/mig-mapping}' | base64 -d; echo
echo; echo "\$ nvidia-smi -L   # on $mig_node"
for _ in $(seq 1 50); do
  NODE_NAME=$mig_node FAKEGPU_EXPORTER_URL=http://$exporter_addr target/debug/nvidia-smi -L 2>/dev/null | grep -q MIG && break
  sleep 0.2
done
NODE_NAME=$mig_node FAKEGPU_EXPORTER_URL=http://$exporter_addr target/debug/nvidia-smi -L || true

# What to try next, on whichever nodes the demo ends with.
next_steps() { # <real node, or empty>
  echo
  echo "What to try next (the book: docs/src/, or mdbook serve docs):"
  echo "  kubectl edit gnp h100-kwok        # spec.gpu.count: 4, and the nodes' GPUs follow"
  echo "  kubectl annotate node h100-kwok-0 fakegpu.dev/unhealthy-gpus=0,1   # allocatable drops to 6"
  echo "  kubectl get gnp h100-kwok -o yaml # conditions, nodes, GPUs, allocated"
  if [[ -n $1 ]]; then
    echo "  kubectl exec -n demo real-gpu-pod -- nvidia-smi --query-gpu=name,memory.total --format=csv"
  else
    echo "  curl -s $exporter_addr/metrics | grep DCGM_FI_DEV_FB_USED"
  fi
  echo
  echo "Use the cluster:"
  hack/cluster.sh env
}

echo; echo "==> a real node: kubelet, containerd and runc, with the bundle running in-cluster"
why=${FAKEGPU_REAL_NODE_SKIP_WHY:-}
[[ -n $why ]] || why=$(hack/node.sh check) || true
if [[ -n $why ]]; then
  echo "no real node on this machine ($why); the KWOK nodes above are the demo"
  next_steps ""
  echo "Stop it: kill \$(cat $state/run/exporter.pid); hack/operator.sh stop; hack/cluster.sh down"
  exit 0
fi
echo "building the images (hack/images.sh: a cold build takes 5-10 minutes, cargo shows its progress)"
hack/images.sh >/dev/null
# The bundle's own operator and exporter take over from the host processes above (one of
# each serves the cluster, as a user's install has it).
kill "$(cat "$state/run/exporter.pid")" 2>/dev/null || true
hack/operator.sh stop
hack/node.sh up
hack/node.sh bundle
real_node=$(hack/node.sh name)
$kubectl label node "$real_node" --overwrite run.ai/simulated-gpu-node-pool=default >/dev/null
$kubectl wait node "$real_node" --timeout=90s --for=jsonpath='{.status.allocatable.nvidia\.com/gpu}'=2 >/dev/null
$kubectl apply -n demo -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: real-gpu-pod}
spec:
  runtimeClassName: nvidia
  nodeSelector: {kubernetes.io/hostname: $real_node}
  containers:
  - name: main
    image: fakegpu.local/busybox:v1
    imagePullPolicy: Never
    command: [sleep, "86400"]
    resources: {limits: {nvidia.com/gpu: 1}}
EOF
$kubectl wait -n demo pod/real-gpu-pod --for=condition=Ready --timeout=90s >/dev/null
show get pods -n fakegpu-system -o wide
show get node "$real_node" -o 'custom-columns=NODE:.metadata.name,POOL:.metadata.labels.fakegpu\.dev/pool,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product,GPU:.status.allocatable.nvidia\.com/gpu'
show exec -n demo real-gpu-pod -- nvidia-smi
show exec -n demo real-gpu-pod -- nvidia-smi -L
# NVML's own users in a GPU container: go-nvml (as pynvml and frameworks do) loads
# libnvidia-ml.so.1 by name and sees the container's GPU (the node's other one) with its own
# process on it (waiting up to 30 s for the pod's use to reach the node's document); the
# probe's image carries Debian 11's glibc 2.31, as Ubuntu 20.04-based CUDA images do.
$kubectl apply -n demo -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: nvml-probe}
spec:
  runtimeClassName: nvidia
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: $real_node}
  containers:
  - name: main
    image: fakegpu.local/nvml-probe:v1
    imagePullPolicy: Never
    command: [/nvml-probe]
    env: [{name: NVML_PROBE_AWAIT_PROCESS, value: "30"}]
    resources: {limits: {nvidia.com/gpu: 1}}
EOF
$kubectl wait -n demo pod/nvml-probe --for=jsonpath='{.status.phase}'=Succeeded --timeout=90s >/dev/null
show logs -n demo nvml-probe

next_steps "$real_node"
echo "Stop it: hack/node.sh down; hack/cluster.sh down"
