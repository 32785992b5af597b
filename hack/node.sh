#!/usr/bin/env bash
# A real kubelet node in the local cluster of hack/cluster.sh: kubelet (built from the same
# Kubernetes modules as the control plane), containerd 2 (from the Go module proxy), Debian's
# runc and CNI plugins, a pause image built here, and kube-proxy (nftables) for Services as
# any cluster has them. All traffic stays on this machine: the kubelet on loopback, pods on
# the node's own bridge, which routes nowhere else.
#
#   hack/node.sh up        build what is missing, start containerd and the kubelet, wait for Ready
#   hack/node.sh down      delete the node's pods, stop everything, undo what they did to the host
#   hack/node.sh load TAR  import an OCI image archive into the node's containerd as
#                          `kind load image-archive` does (hack/images.sh)
#   hack/node.sh bundle [--pull-from REGISTRY | --release DIR]
#                          apply the install bundle as it is (config/: operator, exporter and
#                          node agents run in-cluster), with hack/images.sh's archives loaded,
#                          or pulled by the kubelet from REGISTRY (plain HTTP) as a mirror of
#                          the registry the bundle names; or a release's install.yaml
#                          (hack/release.sh's DIR) as it is, its pinned images pulled from the
#                          registry it names
#   hack/node.sh restart-kubelet   stop the kubelet and start it again (pods keep running)
#   hack/node.sh api-relay stop|start
#                          stop the relay by which pods reach the API server (their connections
#                          are then refused, as in an API server outage; the kubelet, on
#                          loopback, keeps it), or start it again
#   hack/node.sh name      print the node's name
#   hack/node.sh snapshot  print the host state `down` must restore (mounts, iptables, nftables,
#                          cgroups, links, directories): hack/test.sh compares before and after
#   hack/node.sh check     say whether this machine can run the node (Linux, root, runc, CNI)
#   hack/node.sh running   print which node runs here and in which cluster's directory (the
#                          demo's, say), or fail when none does
#
# Needs root, Linux, Debian's `runc`, `containernetworking-plugins` and `nftables`, and a running cluster
# (KUBECONFIG from hack/cluster.sh, whose CA signs the node's certificates). One node per
# machine: the kubelet's ports and /var/lib/kubelet (which the install bundle's hostPaths name)
# are the host's. Node name: $FAKEGPU_NODE_NAME (default fakegpu-node-0).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/oci.sh
source "$repo/hack/lib/oci.sh"
# shellcheck source=hack/lib/proc.sh
source "$repo/hack/lib/proc.sh"
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
bin=${FAKEGPU_BIN_DIR:-$repo/target/hack-bin}
node=${FAKEGPU_NODE_NAME:-fakegpu-node-0}
containerd_version=v2.2.3
# Host paths the node owns. /var/lib/kubelet is fixed (device-plugin and DRA sockets live there
# for the bundle's hostPaths); the rest is the node's own, removed by `down`.
kubelet_root=/var/lib/kubelet
node_lib=/var/lib/fakegpu-node
node_run=/run/fakegpu-node
# What `up` found on the host before it changed anything, and the mark that the kubelet root is
# the node's. Kept on the host, not in the checkout's .cache, so that `down` from any checkout
# can undo a node whose run was cut off (a killed test run, a machine image taken mid-run).
host_record=$node_lib/host-record
containerd_sock=$node_run/containerd.sock
cni_network=fakegpu
cni_bridge=fakegpu0
cni_subnet=10.88.0.0/24
# The bridge's own address, the pods' gateway. The API server (on the host's loopback only)
# is relayed here by hack/forward; hack/cluster.sh publishes it as the `kubernetes` Service's
# endpoint and its serving certificate names it.
bridge_ip=10.88.0.1
# hack/cluster.sh's --service-cluster-ip-range: routed to the bridge, so that the host reaches
# ClusterIPs (kube-proxy's rules) on a machine without a default route too.
service_cidr=10.0.0.0/24
# kube-proxy's health and metrics, on loopback.
proxy_healthz=127.0.0.1:10256
proxy_metrics=127.0.0.1:10249
# Host directories the node's pods write into (CDI specs, nvidia-smi, CNI leases): `down`
# removes what was put there, and the directory itself when `up` created it.
host_dirs=(/var/run/cdi /var/lib/fakegpu /var/lib/cni)
# The chains the kubelet adds to iptables (see pkg/kubelet/kubelet_network_linux.go).
kubelet_chains=(KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT)
pause_ref=fakegpu.local/pause:v1
# A shell for test and demo pods (no registry to pull one from): Debian's busybox-static.
busybox_ref=fakegpu.local/busybox:v1
# Prometheus for in-cluster scrapes of the exporter: Debian's binary and the libc it links.
prometheus_ref=fakegpu.local/prometheus:v1
# NVML as a GPU container's programs see it: go-nvml's view printed as JSON
# (hack/nvml-check/cmd/nvml-probe), built against an older glibc than this machine's and
# carrying it (Debian 11's, as Ubuntu 20.04's CUDA images do).
nvml_probe_ref=fakegpu.local/nvml-probe:v1
# The node's state, pid files and logs live in its cluster's directory <dir>.
use_cluster_dir() { # <dir>
  dir=$1
  state=$dir/node
  proc_run_dir=$state
  proc_log_dir=$dir/logs
}
use_cluster_dir "$dir"

# A node records on the host the cluster directory it joined; `down` and `running` follow that
# record, so that the test suite (a cluster directory of its own) can find and stop the demo's
# node, whose kubelet and containerd it did not start.
adopt_recorded_cluster() {
  local recorded
  recorded=$(cat "$host_record/cluster-dir" 2>/dev/null) || return 0
  [[ -n $recorded && $recorded != "$dir" && -d $recorded ]] || return 0
  use_cluster_dir "$recorded"
}

# Prints the running node's name and cluster directory; fails when no node of this script runs.
running() {
  [[ -f $host_record/owns-kubelet-root ]] && proc_running kubelet || return 1
  echo "$node of the cluster in $dir"
}

log() { printf '[node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
k() { "$bin/kubectl" --kubeconfig="$dir/admin.kubeconfig" "$@"; }
apiserver_url() { k config view --minify -o jsonpath='{.clusters[0].cluster.server}'; }
ctr_() { "$bin/containerd/ctr" --address "$containerd_sock" --namespace k8s.io "$@" 2>>"$dir/logs/ctr.log"; }

# --- can this machine run it ---------------------------------------------------------------

check() {
  [[ $(uname -s) == Linux ]] || { echo "not Linux"; return 1; }
  [[ $(id -u) == 0 ]] || { echo "not root (the kubelet and containerd need root)"; return 1; }
  command -v runc >/dev/null || { echo "runc not found (apt-get install runc)"; return 1; }
  command -v nft >/dev/null || { echo "nft not found (apt-get install nftables): kube-proxy needs it"; return 1; }
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
    { echo "CNI plugins not found (apt-get install containernetworking-plugins)"; return 1; }
  [[ -x /bin/busybox ]] && grep -q 'not a dynamic' <(ldd /bin/busybox 2>&1) ||
    { echo "no static busybox for test pods (apt-get install busybox-static)"; return 1; }
  if [[ -e $kubelet_root ]] && ! [[ -f $host_record/owns-kubelet-root ]]; then
    echo "$kubelet_root exists: another kubelet owns this machine"
    return 1
  fi
  local others
  others=$(kubelets_elsewhere)
  if [[ -n $others ]]; then
    echo "a kubelet this checkout did not start runs on $kubelet_root (pid $others): stop it first"
    return 1
  fi
}

# Kubelets on this host with the node's root directory, other than the one this checkout
# started: another checkout's node, which only its own `down` may stop.
kubelets_elsewhere() {
  local pid ours
  ours=$(proc_pid kubelet)
  for pid in $(pgrep -f -- "--root-dir=$kubelet_root( |$)" || true); do
    [[ $pid == "$ours" ]] || echo "$pid"
  done
}

# --- build -----------------------------------------------------------------------------------

build() {
  "$repo/hack/cluster.sh" build # the kubelet is in the control plane's multi-call binary
  if [[ ! -x $bin/containerd/containerd || $(cat "$bin/containerd/version" 2>/dev/null) != "$containerd_version" ]]; then
    log "building containerd $containerd_version from the Go module proxy (about 2 minutes on 2 cores)"
    local start=$SECONDS cmd
    mkdir -p "$bin/containerd"
    for cmd in containerd containerd-shim-runc-v2 ctr; do
      (cd /tmp && CGO_ENABLED=0 GOBIN=$bin/containerd go install -trimpath -ldflags='-s -w' \
        -tags 'no_btrfs no_devmapper no_zfs' "github.com/containerd/containerd/v2/cmd/$cmd@$containerd_version")
    done
    echo "$containerd_version" >"$bin/containerd/version"
    log "built containerd in $((SECONDS - start))s"
  fi
  local pause_stamp
  pause_stamp=$(cat "$repo"/hack/pause/go.mod "$repo"/hack/pause/*.go | sha256sum | cut -c1-16)
  if [[ ! -f $bin/pause.tar || $(cat "$bin/pause.stamp" 2>/dev/null) != "$pause_stamp" ]]; then
    log "building the pause image"
    local_image pause "$pause_ref" 65535:65535 fill_pause /pause
    echo "$pause_stamp" >"$bin/pause.stamp"
  fi
  if [[ ! -f $bin/busybox.tar || /bin/busybox -nt $bin/busybox.tar ]]; then
    local_image busybox "$busybox_ref" 0:0 fill_busybox /bin/sh
  fi
  local forward_stamp
  forward_stamp=$(cat "$repo"/hack/forward/go.mod "$repo"/hack/forward/*.go | sha256sum | cut -c1-16)
  if [[ ! -x $bin/forward || $(cat "$bin/forward.stamp" 2>/dev/null) != "$forward_stamp" ]]; then
    log "building the bridge forwarder (hack/forward)"
    CGO_ENABLED=0 go build -C "$repo/hack/forward" -trimpath -ldflags='-s -w' -o "$bin/forward" .
    echo "$forward_stamp" >"$bin/forward.stamp"
  fi
  local probe_stamp
  probe_stamp=$(cat "$repo"/hack/nvml-check/go.{mod,sum} "$repo"/hack/nvml-check/cmd/nvml-probe/*.go \
    "$repo"/hack/glibc-root.sh | sha256sum | cut -c1-16)
  if [[ ! -f $bin/nvml-probe.tar || $(cat "$bin/nvml-probe.stamp" 2>/dev/null) != "$probe_stamp" ]]; then
    log "building the NVML probe image (hack/nvml-check/cmd/nvml-probe)"
    local_image nvml-probe "$nvml_probe_ref" 0:0 fill_nvml_probe /nvml-probe
    echo "$probe_stamp" >"$bin/nvml-probe.stamp"
  fi
  if [[ -x /usr/bin/prometheus && ( ! -f $bin/prometheus.tar || /usr/bin/prometheus -nt $bin/prometheus.tar ) ]]; then
    local_image prometheus "$prometheus_ref" 65534:65534 fill_prometheus /bin/prometheus
  fi
}

# Writes $bin/<name>.tar: image <ref> running <entrypoint> as <user>, of the files <fill> puts
# into an empty root.
local_image() { # <name> <ref> <user> <fill> <entrypoint...>
  local name=$1 ref=$2 user=$3 fill=$4 rootfs
  shift 4
  rootfs=$(mktemp -d)
  "$fill" "$rootfs"
  oci_image_archive "$bin/$name.tar" "$ref" "$user" "$rootfs" "$@" >/dev/null
  rm -rf "$rootfs"
}

fill_pause() {
  (cd "$repo/hack/pause" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$1/pause" .)
  chmod 0755 "$1" "$1/pause"
}

fill_busybox() {
  local applet
  mkdir -p "$1/bin" "$1/tmp" "$1/usr/bin"
  install -m 0755 /bin/busybox "$1/bin/busybox"
  for applet in sh ls cat env sleep grep wc head tail echo true test ps; do
    ln -s busybox "$1/bin/$applet"
  done
  chmod 0755 "$1" "$1/bin" "$1/usr" "$1/usr/bin"
  chmod 1777 "$1/tmp"
}

# Copies into root <root> what the dynamic linker needs for <binary>: the libraries ldd names,
# at the same paths.
copy_libraries() { # <binary> <root>
  local lib
  for lib in $(ldd "$1" | grep -oE '/[^ ]+\.so[^ ]*'); do
    mkdir -p "$2$(dirname "$lib")"
    cp -L "$lib" "$2$lib"
  done
}

fill_prometheus() {
  mkdir -p "$1/bin" "$1/prometheus"
  install -m 0755 /usr/bin/prometheus "$1/bin/prometheus"
  copy_libraries /usr/bin/prometheus "$1"
  chmod -R u=rwX,go=rX "$1"
  # Its data directory, writable by the image's user.
  chmod 0777 "$1/prometheus"
}

# The oldest glibc image the shipped NVML library is checked in: go-nvml dlopens the library
# (cgo, so glibc), built against Debian 11's glibc 2.31 (hack/glibc-root.sh as gcc's sysroot)
# and given that glibc's runtime and nothing else: no libgcc_s, which distribution images have
# but the library must not need.
fill_nvml_probe() {
  local glibc libs lib
  glibc=$("$repo/hack/glibc-root.sh")
  libs=$glibc/lib/x86_64-linux-gnu
  CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations \
    CC="gcc --sysroot=$glibc -B$glibc/usr/lib/x86_64-linux-gnu -L$glibc/usr/lib/x86_64-linux-gnu -L$libs" \
    go build -C "$repo/hack/nvml-check" -trimpath -ldflags='-s -w' -o "$1/nvml-probe" ./cmd/nvml-probe
  mkdir -p "$1/lib/x86_64-linux-gnu" "$1/lib64"
  # The probe's libraries and the library's (libc, libpthread, libdl), and the loader.
  for lib in libc.so.6 libpthread.so.0 libdl.so.2 ld-linux-x86-64.so.2; do
    cp -L "$libs/$lib" "$1/lib/x86_64-linux-gnu/$lib"
  done
  ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$1/lib64/ld-linux-x86-64.so.2"
  chmod -R u=rwX,go=rX "$1"
}

# --- configuration ---------------------------------------------------------------------------

# The node's client certificate (Node authorizer, NodeRestriction) and its serving certificate,
# signed by the cluster's CA, and kube-proxy's client certificate; sets $client, $serving and
# $proxy_client, their paths without .crt/.key.
certificates() {
  client=$("$repo/hack/cluster.sh" cert "$node-client" "/O=system:nodes/CN=system:node:$node")
  # The user the API server's default binding gives kube-proxy's role (system:node-proxier).
  proxy_client=$("$repo/hack/cluster.sh" cert kube-proxy "/CN=system:kube-proxy")
  serving=$("$repo/hack/cluster.sh" cert "$node-serving" "/O=system:nodes/CN=system:node:$node" \
    "IP:127.0.0.1,DNS:$node")
}

# A kubeconfig for the cluster's API server with a client certificate (<cert>.crt/.key).
kubeconfig() { # <server> <cert>
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$1", certificate-authority: "$dir/pki/ca.crt"}
users:
- name: client
  user: {client-certificate: "$2.crt", client-key: "$2.key"}
contexts:
- name: client
  context: {cluster: local, user: client}
current-context: client
EOF
}

configure() {
  local server
  server=$(apiserver_url)
  mkdir -p "$state" "$state/cni"
  kubeconfig "$server" "$client" >"$state/kubelet.kubeconfig"
  kubeconfig "$server" "$proxy_client" >"$state/kube-proxy.kubeconfig"
  # nftables (its own tables, which `--cleanup` removes), every Service connection masqueraded
  # (the bridge has no br_netfilter: a pod's reply to another pod must come back through the
  # host), and the host's conntrack sysctls left as they are (0: do not set).
  cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$state/kube-proxy.kubeconfig"}
hostnameOverride: $node
mode: nftables
nftables: {masqueradeAll: true}
clusterCIDR: $cni_subnet
detectLocalMode: ClusterCIDR
bindAddress: 127.0.0.1
healthzBindAddress: $proxy_healthz
metricsBindAddress: $proxy_metrics
nodePortAddresses: [127.0.0.1/32]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  # Loopback only; webhook authentication and authorization, so that `kubectl logs/exec` work
  # with the API server's kubelet client certificate and nothing else reaches the kubelet.
  cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$dir/pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$serving.crt"
tlsPrivateKeyFile: "$serving.key"
containerRuntimeEndpoint: "unix://$containerd_sock"
# This kind of machine has cgroup v1, which Kubernetes >= 1.35 refuses unless told.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# The disk is shared with builds: never evict test pods or collect their images.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
rotateCertificates: false
EOF
  # Plain runc (the `nvidia` RuntimeClass's handler), CDI for DRA, and the settings this kind
  # of machine needs (see the README's node section): root lacks CAP_SYS_RESOURCE, so the
  # sandbox's oom_score_adj must not go below ours; the pause image is local.
  cat >"$state/containerd.toml" <<EOF
version = 3
root = "$node_lib/containerd"
state = "$node_run/containerd"
[grpc]
  address = "$containerd_sock"
[ttrpc]
  address = "$containerd_sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$state/certs.d"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$pause_ref"
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["/var/run/cdi"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$state/cni"
EOF
  # A bridge without masquerading: pods reach each other, the host, and the Services'
  # ClusterIPs through the host (kube-proxy); no default route, nothing else.
  cat >"$state/cni/10-$cni_network.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "$cni_network", "plugins": [
  {"type": "bridge", "bridge": "$cni_bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cni_subnet"}]],
     "routes": [{"dst": "$service_cidr", "gw": "$bridge_ip"}]}}
]}
EOF
}

# --- processes -------------------------------------------------------------------------------

# PATH first: containerd starts the shim it finds there, and the shim finds runc by config.
start() { # <name> <command...>
  local name=$1
  shift
  proc_running "$name" && return
  proc_start "$name" env "PATH=$bin/containerd:$PATH" "$@"
}

node_ready() {
  k get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

# Remembers which host directories and nftables tables existed before `up`, so that `down`
# removes only what the node made.
record_host_state() {
  [[ -f $host_record/host-dirs ]] && return
  mkdir -p "$host_record"
  local d
  for d in "${host_dirs[@]}"; do
    if [[ -e $d ]]; then echo "existed $d"; else echo "created $d"; fi
  done >"$host_record/host-dirs"
  if command -v nft >/dev/null; then nft list tables >"$host_record/nft-tables" 2>/dev/null || true; fi
  : >"$host_record/owns-kubelet-root"
  echo "$dir" >"$host_record/cluster-dir"
}

start_kubelet() {
  start kubelet "$bin/kubelet" --config="$state/kubelet.yaml" --kubeconfig="$state/kubelet.kubeconfig" \
    --root-dir="$kubelet_root" --node-ip=127.0.0.1 --hostname-override="$node" --v=2
}

kubelet_healthy() { curl -sf http://127.0.0.1:10248/healthz; }

restart_kubelet() {
  proc_running kubelet || die "the node is not up: run $0 up"
  proc_stop kubelet
  start_kubelet
  proc_wait_for kubelet 60 kubelet_healthy
  log "kubelet restarted"
}

api_relay() { # stop|start
  proc_running kubelet || die "the node is not up: run $0 up"
  case ${1:-} in
    stop) proc_stop forward; log "pods' relay to the API server stopped: their connections are refused" ;;
    start) start_api_relay; log "pods' relay to the API server started" ;;
    *) die "usage: $0 api-relay stop|start" ;;
  esac
}

up() {
  local why
  why=$(check) || die "this machine cannot run a real node: $why"
  [[ -f $dir/admin.kubeconfig ]] || die "no cluster in $dir: run hack/cluster.sh up first"
  if [[ -f $host_record/owns-kubelet-root ]] && ! proc_running kubelet; then
    log "a node whose run was cut off is still here: taking it down first"
    down
  fi
  build
  local start=$SECONDS
  mkdir -p "$state"
  record_host_state
  certificates
  configure
  mkdir -p "$node_lib" "$node_run"
  bridge_network
  start containerd "$bin/containerd/containerd" --config "$state/containerd.toml"
  proc_wait_for containerd 30 ctr_ version
  ctr_ images import "$bin/pause.tar" >/dev/null
  ctr_ images label "$pause_ref" io.cri-containerd.pinned=pinned >/dev/null
  ctr_ images import "$bin/busybox.tar" >/dev/null
  ctr_ images import "$bin/nvml-probe.tar" >/dev/null
  if [[ -f $bin/prometheus.tar ]]; then ctr_ images import "$bin/prometheus.tar" >/dev/null; fi
  start_kubelet
  proc_wait_for "node $node" 120 k get node "$node"
  # The kubelet refuses a loopback address in the node's status ("nodeIP can't be loopback
  # address", logged at every status update) and so publishes none; the API server needs one
  # to reach it for `kubectl logs/exec`. Set as KWOK sets its nodes' addresses.
  k patch node "$node" --subresource=status --type=merge \
    -p '{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":"'"$node"'"}]}}' >/dev/null
  proc_wait_for "node $node" 120 node_ready
  start kube-proxy "$bin/kube-proxy" --config="$state/kube-proxy.yaml" --v=2
  proc_wait_for kube-proxy 60 curl -sf "http://$proxy_healthz/healthz"
  log "node $node Ready in $((SECONDS - start))s (kubelet, containerd $containerd_version, runc, CNI bridge $cni_bridge, kube-proxy)"
}

# The pods' bridge, made before any pod (the CNI plugin would make it with the first one, and
# takes it as it finds it), the route of the Services' ClusterIPs, and the forwarder that lets
# pods on it reach the API server on the host's loopback. Nothing routes the bridge anywhere
# else.
bridge_network() {
  openssl x509 -in "$dir/pki/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$bridge_ip" ||
    die "the API server's certificate does not name $bridge_ip: restart the cluster (hack/cluster.sh down; hack/cluster.sh up)"
  [[ $(k get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[*].endpoints[*].addresses[*]}') == "$bridge_ip" ]] ||
    die "the kubernetes Service's endpoint is not $bridge_ip: restart the cluster (hack/cluster.sh down; hack/cluster.sh up)"
  ip link show "$cni_bridge" >/dev/null 2>&1 || ip link add "$cni_bridge" type bridge
  ip addr replace "$bridge_ip/${cni_subnet#*/}" dev "$cni_bridge"
  ip link set "$cni_bridge" up
  ip route replace "$service_cidr" dev "$cni_bridge" src "$bridge_ip"
  start_api_relay
}

# The relay by which pods on the bridge reach the API server on the host's loopback.
start_api_relay() {
  local port
  port=$(apiserver_url)
  port=${port##*:}
  start forward "$bin/forward" "$bridge_ip:$port=127.0.0.1:$port"
}

# --- the install bundle, in-cluster ---------------------------------------------------------

# Imports an archive with the command `kind load image-archive` runs inside a kind node.
load_archive() { # <archive>
  ctr_ images import --all-platforms --digests --snapshotter=overlayfs - <"$1" >/dev/null
}

# Makes <registry> (plain HTTP) the mirror of every registry the bundle's images name, and
# forgets those images, so that the kubelet pulls them as on a cluster without archives.
# Has the node's containerd fetch <host>'s images from <endpoint>, plain HTTP on loopback here,
# <server> being where it would go without one.
registry_hosts() { # <host> <endpoint> <server>
  mkdir -p "$state/certs.d/$1"
  cat >"$state/certs.d/$1/hosts.toml" <<EOF
server = "$3"
[host."http://$2"]
  capabilities = ["pull", "resolve"]
EOF
}

pull_from() { # <registry>
  local registry=$1 ref host
  for ref in $("$repo/hack/images.sh" refs); do
    host=${ref%%/*}
    registry_hosts "$host" "$registry" "https://$host"
    ctr_ images rm "$ref" >/dev/null 2>&1 || true
  done
}

bundle() {
  local images=${FAKEGPU_IMAGES_DIR:-$repo/target/images} archive source=(-k "$repo/config")
  proc_running containerd || die "the node is not up: run $0 up"
  # Registry mirrors of an earlier bundle (--pull-from, --release) go: each way sets its own.
  rm -rf "$state/certs.d"
  case ${1:-} in
    --pull-from)
      [[ -n ${2:-} ]] || die "usage: $0 bundle [--pull-from REGISTRY | --release DIR]"
      pull_from "$2"
      ;;
    --release)
      [[ -f ${2:-}/install.yaml ]] || die "usage: $0 bundle --release DIR (a hack/release.sh output, with install.yaml)"
      local registry
      # The release's images are pinned by digest in the registry it pushed them to.
      for registry in $(sed -n 's|^ *image: *\([^/]*\)/.*|\1|p' "$2/install.yaml" | sort -u); do
        registry_hosts "$registry" "$registry" "http://$registry"
      done
      source=(-f "$2/install.yaml")
      ;;
    *)
      for archive in "$images"/fakegpu-*.tar; do
        [[ -f $archive ]] || die "no image archives in $images: run hack/images.sh"
        load_archive "$archive"
      done
      ;;
  esac
  # As a user applies it. The install owns what it applies, over any hand edit (a test
  # scaling the operator).
  k apply --server-side --force-conflicts --field-manager=fakegpu-install "${source[@]}" >/dev/null
  k wait --for=condition=Established crd/gpunodepools.fakegpu.dev crd/computedomains.resource.nvidia.com --timeout=60s >/dev/null
  # Available, not `rollout status`: a Deployment applied before any node could run it (the
  # demo's, while the images were building) is past its progress deadline already.
  k -n fakegpu-system wait --for=condition=Available --timeout=180s \
    deployment/fakegpu-operator deployment/fakegpu-exporter >/dev/null
  log "install bundle running in-cluster (${1:+$1 }${2:-images loaded from $images}: ${source[*]})"
}

# --- teardown --------------------------------------------------------------------------------

# Deletes the node's pods and waits while the kubelet stops them, which runs CNI DEL and DRA
# unprepare. DaemonSet pods come back until the kubelet stops; what is left is removed below.
delete_pods() {
  k get node "$node" >/dev/null 2>&1 || return 0
  proc_running kubelet || return 0
  k cordon "$node" >/dev/null 2>&1 || true
  k delete pods -A --field-selector "spec.nodeName=$node" --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    # Pods that are not DaemonSet pods (those are re-created) are all gone.
    [[ -z $(k get pods -A --field-selector "spec.nodeName=$node" \
      -o jsonpath='{range .items[?(@.metadata.ownerReferences[0].kind!="DaemonSet")]}{.metadata.name}{"\n"}{end}' 2>/dev/null) ]] && break
    sleep 1
  done
  k delete pods -A --field-selector "spec.nodeName=$node" --wait=false >/dev/null 2>&1 || true
  sleep 2
}

# Whatever containers remain (the kubelet is gone): killed, removed, their snapshots with them.
remove_containers() {
  [[ -S $containerd_sock ]] && proc_running containerd || return 0
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$id" >/dev/null 2>&1 || true; done
}

unmount_under() { # <dir>...: every mount at or below, deepest first
  local d m
  for d in "$@"; do
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(findmnt -rn -o TARGET | grep -E "^$d(/|$)" | sort -r)
  done
}

remove_iptables_chains() {
  local tool table chain rule
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null || continue
    for table in filter nat mangle; do
      for chain in "${kubelet_chains[@]}"; do
        "$tool" -t "$table" -S "$chain" >/dev/null 2>&1 || continue
        # Jumps into the chain from the built-in chains first, then the chain itself.
        while read -r rule; do
          eval "$tool -t $table ${rule/-A /-D }" 2>/dev/null || true
        done < <("$tool" -t "$table" -S 2>/dev/null | grep -E -- "^-A [A-Z]+ .*-j $chain( |$)")
        "$tool" -t "$table" -F "$chain" 2>/dev/null || true
        "$tool" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# The kubelet's iptables calls create the (iptables-nft) tables they touch; once its chains are
# gone, the tables that were not there before `up` and hold no rule go too.
remove_nft_tables() {
  command -v nft >/dev/null && [[ -f $host_record/nft-tables ]] || return 0
  local word family table
  while read -r word family table; do
    [[ $word == table ]] || continue
    grep -qx "table $family $table" "$host_record/nft-tables" && continue
    if [[ -z $(nft list table "$family" "$table" 2>/dev/null | grep -vE '^[[:space:]]*(table |chain |type |policy |}|$)') ]]; then
      nft delete table "$family" "$table" 2>/dev/null || true
    fi
  done < <(nft list tables 2>/dev/null)
}

remove_cgroups() { # the kubelet's QoS tree under every controller, deepest first
  local tree
  for tree in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [[ -d $tree ]] || continue
    find "$tree" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

restore_host_dirs() {
  [[ -f $host_record/host-dirs ]] || return 0
  local how d
  while read -r how d; do
    if [[ $how == created ]]; then
      rm -rf "$d"
    fi
  done <"$host_record/host-dirs"
  # Where the directory was there before, only what the node's pods left in it goes.
  rm -f /var/run/cdi/k8s.gpu.nvidia.com-* /var/run/cdi/k8s.compute-domain.nvidia.com-* 2>/dev/null || true
  rm -rf "/var/lib/cni/networks/$cni_network" "/var/lib/cni/results/$cni_network-"* 2>/dev/null || true
}

down() {
  # Only what `up` started: the chains, cgroups and directories below may belong to another
  # kubelet otherwise.
  [[ -f $host_record/owns-kubelet-root ]] || { log "no node of hack/node.sh here"; return 0; }
  [[ -z $(kubelets_elsewhere) ]] || die "a kubelet this checkout did not start runs on $kubelet_root: stop it first"
  delete_pods
  # Its rules go with it (nftables tables, and any iptables chains an older mode left).
  proc_stop kube-proxy
  "$bin/kube-proxy" --cleanup >>"$dir/logs/kube-proxy.log" 2>&1 || true
  proc_stop kubelet
  remove_containers
  proc_stop containerd
  # Shims outlive containerd by design; these are ours (their address names our socket).
  pkill -KILL -f "containerd-shim-runc-v2 .*$containerd_sock" 2>/dev/null || true
  sleep 0.5
  unmount_under "$kubelet_root" "$node_lib" "$node_run"
  proc_stop forward
  ip link delete "$cni_bridge" 2>/dev/null || true
  remove_iptables_chains
  remove_nft_tables
  remove_cgroups
  # The record goes last, with the node's directory: a down cut off before here can run again.
  restore_host_dirs
  rm -rf "$kubelet_root" "$node_run" "$node_lib"
  if [[ -f $dir/admin.kubeconfig ]]; then
    k delete node "$node" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  log "node $node stopped and the host restored"
}

# --- snapshot of what `down` must restore ----------------------------------------------------

snapshot() {
  echo "# mounts"
  findmnt -rn -o TARGET | sort
  echo "# links"
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
  for tool in iptables ip6tables; do
    command -v "$tool-save" >/dev/null || continue
    echo "# $tool"
    "$tool-save" 2>/dev/null | { grep -v '^#' || true; } | sed -E 's/\[[0-9]+:[0-9]+\]//'
  done
  if command -v nft >/dev/null; then
    echo "# nftables"
    nft list ruleset 2>/dev/null | { grep -vE 'counter packets' || true; }
  fi
  echo "# cgroups"
  find /sys/fs/cgroup -mindepth 1 -maxdepth 3 -type d -name 'kube*' 2>/dev/null | sort
  echo "# directories"
  local d
  for d in "$kubelet_root" "$node_lib" "$node_run" "${host_dirs[@]}"; do
    if [[ -e $d ]]; then find "$d" -maxdepth 2 | sort; fi
  done
  echo "# processes"
  pgrep -a -f "$bin/(kubelet|containerd|forward|kube-proxy)|containerd-shim-runc-v2 .*$containerd_sock" | awk '{print $2}' | sort || true
}

case ${1:-} in
  up) up ;;
  down) adopt_recorded_cluster; down ;;
  running) adopt_recorded_cluster; running ;;
  load)
    [[ -n ${2:-} ]] || die "usage: $0 load ARCHIVE.tar..."
    shift
    for archive in "$@"; do load_archive "$archive"; done
    ;;
  bundle) shift; bundle "$@" ;;
  restart-kubelet) restart_kubelet ;;
  api-relay) api_relay "${2:-}" ;;
  name) echo "$node" ;;
  snapshot) snapshot ;;
  check) check ;;
  *) echo "usage: $0 {up|down|load ARCHIVE...|bundle|restart-kubelet|api-relay stop|start|name|snapshot|check|running}" >&2; exit 2 ;;
esac
