#!/usr/bin/env bash
# The whole test suite: formatting, clippy, unit tests, fakegpu's NVML library through NVIDIA's
# Go bindings, then the e2e tests against a fresh local control plane (hack/cluster.sh) that is
# stopped again afterwards, then the install path: the images (hack/images.sh), a real kubelet
# node (hack/node.sh) with the bundle running in-cluster, GPU pods in real containers, and a
# check that the node's teardown restored the host. Exits non-zero on any failure.
#
# The real node needs Linux and root (hack/node.sh check says why not); where it cannot run,
# FAKEGPU_SKIP_REAL_NODE=1 skips that phase, saying so, and nothing skips it silently.
#
# What it needs from the machine is checked, and installed where it can be, first
# (hack/lib/prerequisites.sh): anything missing stops it at the start, saying what and how.
#
# The test cluster uses its own state directory and ports, so a demo cluster (hack/demo.sh) can
# keep running beside it; the demo's real node cannot (one kubelet per machine), and the suite
# says at its start that it stops it.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=hack/lib/zigbuild.sh
source "$repo/hack/lib/zigbuild.sh"
# shellcheck source=hack/lib/prerequisites.sh
source "$repo/hack/lib/prerequisites.sh"

step() { printf '\n==> %s\n' "$*"; }

step "prerequisites (hack/lib/prerequisites.sh)"
prerequisites test || exit 1
echo "tools: $(go version), $(cargo --version), $(mdbook --version)"
if [[ ${FAKEGPU_SKIP_REAL_NODE:-} != 1 ]] && running=$(hack/node.sh running); then
  echo "a real node runs on this machine ($running, the demo's or a run cut off):"
  echo "the suite needs the machine's one kubelet, so it stops that node (hack/node.sh down) before"
  echo "its own; a demo's KWOK cluster keeps running (FAKEGPU_SKIP_REAL_NODE=1 leaves the node alone)"
fi

step "the book (hack/docs.sh: mdbook build, every internal link and anchor resolves)"
hack/docs.sh

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "unit tests"
cargo test --locked

step "fuzzing: every target under fuzz/ for ${FAKEGPU_FUZZ_SECONDS:-30}s from its seeds, AddressSanitizer on (hack/fuzz.sh)"
hack/fuzz.sh

step "layers: no file imports a file that imports it; GPU containers load nothing built from kube (e2e/tests/layers.rs, no cluster)"
cargo test --locked -p fakegpu-e2e --test layers

step "NVML library through NVIDIA's go-nvml and go-nvlib (hack/nvml-check)"
cargo build --locked -p fakegpu-nvml -p fakegpu-cuda
# go-nvml's cgo prologue uses functions nvml.h marks deprecated; the warnings are noise here.
FAKEGPU_NVML_LIBRARY=$repo/target/debug/libnvidia_ml.so CGO_CFLAGS=-Wno-deprecated-declarations \
  go -C hack/nvml-check test ./... -count=1 -v

step "NVML's Python users (nvidia-ml-py, gpustat, nvitop) and NVIDIA's CUDA runtime against the libraries (hack/nvml-python.sh)"
FAKEGPU_NVML_LIBRARY=$repo/target/debug/libnvidia_ml.so hack/nvml-python.sh

step "NVIDIA's own nvidia-smi (535, 550) against the library prints what fakegpu's prints"
FAKEGPU_REAL_NVIDIA_SMI=$(hack/nvidia-smi.sh) FAKEGPU_NVML_LIBRARY=$repo/target/debug/libnvidia_ml.so \
  cargo test --locked -p fakegpu-smi --test real_nvidia_smi -- --ignored --exact \
  nvidia_s_nvidia_smi_prints_what_fakegpu_s_prints

step "local control plane for e2e"
export FAKEGPU_CLUSTER_DIR=$repo/.cache/cluster-test
export FAKEGPU_ETCD_PORT=12379 FAKEGPU_ETCD_PEER_PORT=12380 FAKEGPU_APISERVER_PORT=16443
export FAKEGPU_KCM_PORT=20257 FAKEGPU_SCHEDULER_PORT=20259 FAKEGPU_KWOK_PORT=20247
export FAKEGPU_HTTP_ADDR=127.0.0.1:28080
hack/cluster.sh down >/dev/null 2>&1 || true
rm -rf "$FAKEGPU_CLUSTER_DIR"
# The host as it is before anything runs: after the real node's teardown it must be the same
# (everything else the suite starts keeps to its own directories and loopback ports).
mkdir -p "$FAKEGPU_CLUSTER_DIR"
# A node left by a run that was cut off or by the demo (its record is on the host) goes first.
if [[ ${FAKEGPU_SKIP_REAL_NODE:-} != 1 ]]; then hack/node.sh down; fi
hack/node.sh snapshot >"$FAKEGPU_CLUSTER_DIR/host-before.txt"
trap 'hack/kueue.sh stop >/dev/null 2>&1 || true; hack/karpenter.sh stop >/dev/null 2>&1 || true; hack/operator.sh stop >/dev/null 2>&1 || true; hack/node.sh down >/dev/null 2>&1 || true; hack/registry.sh down >/dev/null 2>&1 || true; hack/cluster.sh down >/dev/null 2>&1 || true' EXIT
eval "$(hack/cluster.sh up)"
# Stamped as Kubernetes' own build stamps it: Kueue refuses an API server whose version does not
# parse, and `kubectl version` reports an unstamped client or server as an error.
kube_version=$(go -C hack/controlplane list -m -f '{{.Version}}' k8s.io/kubernetes)
target/hack-bin/kubectl version -o json | python3 -c '
import json, sys
said, want = json.load(sys.stdin), sys.argv[1]
for side in ("clientVersion", "serverVersion"):
    assert said[side]["gitVersion"] == want and said[side]["gitTreeState"] == "clean", (side, said[side])
' "$kube_version"
served=$(curl -sf --cacert "$FAKEGPU_CLUSTER_DIR/pki/ca.crt" "$(target/hack-bin/kubectl config view -o jsonpath='{.clusters[0].cluster.server}')/version")
[[ $(python3 -c 'import json, sys; print(json.load(sys.stdin)["gitVersion"])' <<<"$served") == "$kube_version" ]] ||
  { echo "the API server's /version answers $served, not $kube_version" >&2; exit 1; }
echo "kubectl version and /version: $kube_version"

step "operator from the install bundle (its ServiceAccount, its RBAC)"
hack/operator.sh start

step "e2e tests (KUBECONFIG=$KUBECONFIG)"
# The exporter e2e runs the binary itself; the kstatus e2e computes health with cli-utils.
cargo build --locked -p fakegpu-exporter -p fakegpu-node-agent -p fakegpu-smi
go -C hack/kstatus build -o "$repo/target/hack-bin/kstatus" .
# --nocapture: the idempotence test prints the measured writes per node.
cargo test --locked -p fakegpu-e2e -- --nocapture

step "Kueue queues GPU Jobs on fakegpu's pools (hack/kueue.sh: Kueue's release, its RBAC and webhooks)"
hack/kueue.sh start
cargo test --locked -p fakegpu-e2e --test kueue -- --ignored
hack/kueue.sh stop

step "Karpenter launches GPU nodes into a fakegpu pool and consolidates them (hack/karpenter.sh: its KWOK provider, its chart's RBAC)"
hack/karpenter.sh start
cargo test --locked -p fakegpu-e2e --test karpenter -- --ignored --exact \
  karpenter_launches_gpu_nodes_that_fakegpu_equips_and_consolidates_them_when_empty
hack/karpenter.sh stop

step "node agent driven by the kubelet's own device manager code (hack/kubelet-harness)"
cargo build --locked -p fakegpu-node-agent
# The agent runs with the bundle's node-agent ServiceAccount, so a missing RBAC rule fails.
FAKEGPU_AGENT_KUBECONFIG=$(hack/operator.sh kubeconfig fakegpu-node-agent) \
  FAKEGPU_NODE_AGENT=$repo/target/debug/fakegpu-node-agent \
  go -C hack/kubelet-harness test ./... -count=1 -v

step "images: static binaries and OCI archives (hack/images.sh), reproducible"
hack/images.sh
again=$(mktemp -d)
FAKEGPU_IMAGES_DIR=$again hack/images.sh archives >/dev/null
for archive in target/images/*.tar; do
  cmp -s "$archive" "$again/$(basename "$archive")" ||
    { echo "$archive differs when written again from the same binaries" >&2; exit 1; }
done
rm -rf "$again"
echo "same binaries, same archives: $(cd target/images && ls ./*.tar | tr '\n' ' ')"
# The images' binaries say which version and commit they are.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
commit=$(git rev-parse --short=12 HEAD)
for binary in fakegpu-operator fakegpu-exporter fakegpu-node-agent; do
  said=$("target/x86_64-unknown-linux-musl/release/$binary" --version)
  [[ $said == "$binary $version (commit $commit)" ]] ||
    { echo "$binary --version says \"$said\", not $version at $commit" >&2; exit 1; }
  echo "$said"
done
# The library the node agent's image ships is loaded by GPU containers with their images' glibc:
# NVIDIA's nvidia-smi through it, under Debian 11's glibc 2.31 (Ubuntu 20.04's), prints what
# fakegpu's prints.
FAKEGPU_REAL_NVIDIA_SMI=$(hack/nvidia-smi.sh) FAKEGPU_GLIBC_ROOT=$(hack/glibc-root.sh) \
  FAKEGPU_NVML_LIBRARY=$(nvml_library_in "$repo") \
  cargo test --locked -p fakegpu-smi --test real_nvidia_smi -- --ignored --exact \
  under_an_older_glibc_nvidia_s_nvidia_smi_prints_what_fakegpu_s_prints
# Another reader of the format than containerd (which the real node imports with): skopeo, as
# a user pushing to a registry runs it, must see each archive as the bundle names it.
if command -v skopeo >/dev/null; then
  hack/images.sh archives | while IFS=$'\t' read -r ref digest archive; do
    seen=$(skopeo inspect --format '{{.Digest}} {{.Labels}}' "oci-archive:$archive")
    [[ $seen == "$digest "* && $seen == *"${ref%:*}"* ]] ||
      { echo "skopeo reads $archive as $seen, not $ref $digest" >&2; exit 1; }
    echo "skopeo: $ref $digest"
  done
fi

step "a release through a registry: hack/release.sh to Debian's docker-registry on loopback"
registry=$(hack/registry.sh up)
archived=$(hack/images.sh archives | cut -f1,2 | sed 's|^[^/]*/|'"$registry"'/|')
release=$FAKEGPU_CLUSTER_DIR/release
FAKEGPU_REGISTRY_TLS_VERIFY=false hack/release.sh "v$version" "$registry" "$release" >/dev/null
pushed=$(cat "$release/images.txt")
[[ $pushed == "$archived" ]] ||
  { printf 'pushed:\n%s\nthe archives:\n%s\n' "$pushed" "$archived" >&2; exit 1; }
echo "the registry serves each image with its archive's digest:"
echo "$pushed"
# install.yaml names exactly those images, each by its digest; the API server takes every
# object of it; the checksums hold; each SBOM is CycloneDX naming its binary and its crates.
pinned=$(sed -n 's/^ *image: *//p' "$release/install.yaml" | sort -u)
[[ $pinned == "$(awk -F'\t' '{ print $1 "@" $2 }' "$release/images.txt" | sort -u)" ]] ||
  { printf 'install.yaml names:\n%s\npushed:\n%s\n' "$pinned" "$pushed" >&2; exit 1; }
target/hack-bin/kubectl apply --server-side --force-conflicts --dry-run=server \
  --field-manager=fakegpu-release-check -f "$release/install.yaml" >/dev/null
(cd "$release" && sha256sum --quiet --check SHA256SUMS)
python3 - "$release"/sbom/*.cdx.json <<'EOF'
import json, os, sys
for path in sys.argv[1:]:
    bom = json.load(open(path))
    name = os.path.basename(path).removesuffix(".cdx.json")
    crates = {c["name"] for c in bom["components"]}
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5", path
    assert bom["metadata"]["component"]["name"] in (name, name.replace("lib", "", 1).replace("-", "_")), path
    # Every binary is built from the model; what GPU containers load from nothing of kube's.
    assert {"serde", "fakegpu-model"} <= crates, f"{path}: {sorted(crates)}"
    loaded_by_containers = name in ("libcuda", "libnvidia-ml", "nvidia-smi")
    assert ("kube-client" in crates) != loaded_by_containers, f"{path}: {sorted(crates)}"
print(f"install.yaml pins every image by digest and applies (server dry run); SHA256SUMS holds; {len(sys.argv) - 1} SBOMs")
EOF

if [[ ${FAKEGPU_SKIP_REAL_NODE:-} == 1 ]]; then
  step "real node: SKIPPED (FAKEGPU_SKIP_REAL_NODE=1)"
  exit 0
fi
step "real node (hack/node.sh) with the release's install.yaml in-cluster"
if ! why=$(hack/node.sh check); then
  echo "this machine cannot run the real node: $why (FAKEGPU_SKIP_REAL_NODE=1 skips this phase)" >&2
  exit 1
fi
# The bundle's own operator takes over from the host process the KWOK phase ran.
hack/operator.sh stop
hack/node.sh up
# The release's install.yaml as it is, as a user installs it (the node's kube-proxy routes the
# `kubernetes` Service and the exporter's); the kubelet pulls its images, pinned by digest,
# from the registry the release pushed them to.
hack/node.sh bundle --release "$release"

step "e2e tests on the real node, inside real containers"
# NVIDIA's GPU feature discovery and device plugin, for the `backend: mock` test.
hack/nvidia-components.sh >/dev/null
# NVIDIA's nvidia-smi on the host, for the host's view of the pods' processes.
FAKEGPU_REAL_NODE=$(hack/node.sh name) FAKEGPU_REAL_NVIDIA_SMI=$(hack/nvidia-smi.sh) \
  cargo test --locked -p fakegpu-e2e --test real_node -- --ignored --test-threads=1

step "uninstall: the pools, then kubectl delete -f install.yaml, and no fakegpu object is left"
kubectl=target/hack-bin/kubectl
# A pool's finalizer gives its nodes back, which needs the operator: the pools go first.
$kubectl delete gpunodepools --all --timeout=180s
$kubectl delete -f "$release/install.yaml" --timeout=300s >/dev/null
# What fakegpu made: its CRDs, RBAC, RuntimeClass, namespace, the DeviceClasses its pools own
# and the slices its plugins published (the garbage collector and the kubelet take a moment),
# and the labels it gave nodes.
leftovers() {
  $kubectl get crd,clusterrole,clusterrolebinding,runtimeclass,deviceclass,namespace -o name |
    grep -E 'fakegpu|nvidia|noderesourcetopolog' || true
  $kubectl get resourceslices -o name || true
  $kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.metadata.labels}{"\n"}{end}' |
    grep '"fakegpu\.dev/' || true
}
for _ in $(seq 1 90); do
  left=$(leftovers)
  [[ -z $left ]] && break
  sleep 1
done
[[ -z $left ]] || { printf 'left behind after the uninstall:\n%s\n' "$left" >&2; exit 1; }
echo "no fakegpu CRD, RBAC, RuntimeClass, DeviceClass, namespace, ResourceSlice or node label left"

step "the archives load as kind loads them (ctr import --all-platforms --digests)"
hack/node.sh load target/images/fakegpu-*.tar

step "real node down: the host as it was"
hack/node.sh down
hack/registry.sh down
hack/node.sh snapshot >"$FAKEGPU_CLUSTER_DIR/host-after.txt"
if ! diff -u "$FAKEGPU_CLUSTER_DIR/host-before.txt" "$FAKEGPU_CLUSTER_DIR/host-after.txt"; then
  echo "hack/node.sh down left the host changed (above)" >&2
  exit 1
fi
echo "mounts, links, iptables, nftables, cgroups, directories and processes as before"
