#!/usr/bin/env bash
# A real, local Kubernetes control plane for fakegpu's demo and e2e tests, built from Go modules:
# etcd, kube-apiserver (RBAC on), kube-controller-manager, kube-scheduler and KWOK, on loopback.
#
#   hack/cluster.sh build   build the binaries (only when hack/*/go.{mod,sum} or main.go changed)
#   hack/cluster.sh up      build, start everything, wait until ready, print `export KUBECONFIG=...`
#   hack/cluster.sh down    stop exactly the processes `up` started (pid files), keep logs
#   hack/cluster.sh env     print the export line for the running cluster
#   hack/cluster.sh status  show which components run
#   hack/cluster.sh add-node NAME [key=value ...]   create a Ready KWOK node with extra labels
#   hack/cluster.sh cert NAME SUBJECT [SAN]         a certificate signed by the cluster CA, once:
#                                                   client only, or client and server with a SAN
#                                                   (hack/node.sh's node identity); prints its path
#
# State (certificates, kubeconfig, logs, etcd data, pid files) lives in $FAKEGPU_CLUSTER_DIR,
# default .cache/cluster in the repository (ignored by git). Ports can be moved with the
# FAKEGPU_*_PORT variables below when something else holds them.
#
# KWOK renews each node's lease every quarter of its duration, four at a time: with kubelets'
# 40 s it keeps up with a few thousand nodes here, not with 10 000 (about 250 renewals a second
# against the 1 000 needed), and the node lifecycle controller then marks most of them NotReady
# and taints them, over and over. FAKEGPU_KWOK_LEASE_SECONDS and FAKEGPU_NODE_MONITOR_GRACE
# (kube-controller-manager's --node-monitor-grace-period) lengthen both for large clusters.
# Every new node also carries the `node.kubernetes.io/not-ready` taint until the node lifecycle
# controller takes it off, through kube-controller-manager's client (20 requests a second,
# shared with the TTL controller's rewrites of every node as the cluster grows): 10 000 nodes
# stayed unschedulable for many minutes. FAKEGPU_KCM_API_QPS raises that client's rate (burst
# twice that) and FAKEGPU_KCM_CONTROLLERS chooses the controllers. hack/bench/scale.sh sets all.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
bin=${FAKEGPU_BIN_DIR:-$repo/target/hack-bin}
# shellcheck source=hack/lib/proc.sh
source "$repo/hack/lib/proc.sh"
proc_run_dir=$dir/run
proc_log_dir=$dir/logs
etcd_port=${FAKEGPU_ETCD_PORT:-2379}
etcd_peer_port=${FAKEGPU_ETCD_PEER_PORT:-2380}
apiserver_port=${FAKEGPU_APISERVER_PORT:-6443}
kcm_port=${FAKEGPU_KCM_PORT:-10257}
scheduler_port=${FAKEGPU_SCHEDULER_PORT:-10259}
kwok_port=${FAKEGPU_KWOK_PORT:-10247}
kwok_lease_seconds=${FAKEGPU_KWOK_LEASE_SECONDS:-40}
node_monitor_grace=${FAKEGPU_NODE_MONITOR_GRACE:-}
kcm_api_qps=${FAKEGPU_KCM_API_QPS:-}
kcm_controllers=${FAKEGPU_KCM_CONTROLLERS:-*}
# The one KWOK node `up` creates to prove KWOK works; pools get their own nodes.
smoke_node=kwok-node-0
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- build -------------------------------------------------------------------------------------

# Hash of everything a Go module's binary depends on here; the pinned modules do the rest.
module_stamp() { cat "$1"/go.mod "$1"/go.sum "$1"/*.go | sha256sum | cut -c1-16; }

# Runs a long, silent command and says every minute that it still runs (no silent minutes in
# the demo or CI logs); its exit status is the command's.
with_progress() { # <what> <command...>
  local what=$1 start=$SECONDS ticker
  shift
  (while sleep 60; do log "still building $what ($((SECONDS - start))s)"; done) &
  ticker=$!
  local status=0
  "$@" || status=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$status"
}

build_module() { # <module dir under hack/> <binary name> [<extra -ldflags>]
  local module=$repo/hack/$1 out=$bin/$2 ldflags="-s -w ${3:-}" stamp
  stamp=$( (module_stamp "$module"; echo "$ldflags") | sha256sum | cut -c1-16)
  if [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$stamp" ]]; then
    return
  fi
  log "building $2 from $module (first build takes 10-20 minutes on 2 cores)"
  local start=$SECONDS
  with_progress "$2" bash -c "cd '$module' && CGO_ENABLED=0 go build -trimpath -ldflags='$ldflags' -o '$out' ."
  echo "$stamp" >"$out.stamp"
  log "built $2 in $((SECONDS - start))s"
}

# The version stamps Kubernetes' own build sets (its hack/lib/version.sh), for the release the
# controlplane module pins. Unstamped, the API server answers `v0.0.0-master+$Format:%H$`, which
# Kueue refuses at start and `kubectl version` reports as an error. The module proxy carries a
# release's version and date, not its git commit, so gitCommit stays empty, as a build outside
# git leaves it.
kube_version_ldflags() {
  local version date major minor pkg
  read -r version date < <(cd "$repo/hack/controlplane" &&
    go list -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  major=${version#v}
  minor=${major#*.}
  major=${major%%.*}
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.%s=%s ' "$pkg" gitVersion "$version" "$pkg" gitMajor "$major" "$pkg" gitMinor "$minor" \
      "$pkg" gitTreeState clean "$pkg" buildDate "$date" "$pkg" gitCommit ""
  done
}

build() {
  mkdir -p "$bin"
  build_module controlplane controlplane "$(kube_version_ldflags)"
  build_module kwok kwok
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    ln -sf controlplane "$bin/$name"
  done
}

# --- certificates and kubeconfigs --------------------------------------------------------------

issue_cert() { # <name> <subject> [<subjectAltName>]
  local name=$1 subject=$2 san=${3:-}
  openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/pki/$name.key" \
    -subj "$subject" -out "$dir/pki/$name.csr" 2>/dev/null
  local ext=$dir/pki/$name.ext
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=digitalSignature,keyEncipherment"
    if [[ -n $san ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 365 -sha256 -extfile "$ext" -out "$dir/pki/$name.crt" 2>/dev/null
  rm -f "$dir/pki/$name.csr" "$ext"
}

pki() {
  [[ -f $dir/pki/admin.crt ]] || new_pki
  apiserver_cert
  kubelet_client_cert
}

# The address of hack/node.sh's bridge, where that node's forwarder relays to the API server:
# the API server publishes it as the `kubernetes` Service's endpoint, where the node's
# kube-proxy sends pods that use the Service (10.0.0.1:443, as in any cluster). KWOK nodes
# run no pods and need none of it.
node_bridge_ip=10.88.0.1
# The API server's names: the in-cluster ones (the Service's name and ClusterIP), loopback, and
# the bridge's address.
apiserver_sans="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.0.0.1,IP:$node_bridge_ip"

# Issues the serving certificate, and again for a cluster created before its last name was
# added (read at the API server's next start).
apiserver_cert() {
  if ! openssl x509 -in "$dir/pki/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$node_bridge_ip"; then
    issue_cert apiserver "/CN=kube-apiserver" "$apiserver_sans"
  fi
}

new_pki() {
  log "creating certificates in $dir/pki"
  mkdir -p "$dir/pki"
  openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -subj "/CN=fakegpu-local-ca" \
    -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" 2>/dev/null
  issue_cert admin "/O=system:masters/CN=admin"
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
}

# The API server's client certificate for kubelets (`kubectl logs/exec` on hack/node.sh's real
# node, whose kubelet authorizes it by webhook); also made for clusters created before it was.
kubelet_client_cert() {
  [[ -f $dir/pki/apiserver-kubelet-client.crt ]] ||
    issue_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
}

kubeconfig() {
  local kc=$dir/admin.kubeconfig
  [[ -f $kc ]] && return
  local kubectl=$bin/kubectl
  "$kubectl" config set-cluster fakegpu --kubeconfig="$kc" --server="https://127.0.0.1:$apiserver_port" \
    --certificate-authority="$dir/pki/ca.crt" --embed-certs=true >/dev/null
  "$kubectl" config set-credentials admin --kubeconfig="$kc" --client-certificate="$dir/pki/admin.crt" \
    --client-key="$dir/pki/admin.key" --embed-certs=true >/dev/null
  "$kubectl" config set-context fakegpu --kubeconfig="$kc" --cluster=fakegpu --user=admin >/dev/null
  "$kubectl" config use-context fakegpu --kubeconfig="$kc" >/dev/null
}

# --- processes ---------------------------------------------------------------------------------

start() { # <name> <binary> <args...>
  local name=$1 binary=$2
  shift 2
  proc_running "$name" && { log "$name already runs (pid $(proc_pid "$name"))"; return; }
  proc_start "$name" "$bin/$binary" "$@"
}

admin_curl() {
  curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$@"
}

k() { "$bin/kubectl" --kubeconfig="$dir/admin.kubeconfig" "$@"; }

start_etcd() {
  start etcd etcd --name=fakegpu --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="fakegpu=http://127.0.0.1:$etcd_peer_port" \
    --unsafe-no-fsync --auto-compaction-retention=1 --quota-backend-bytes=8589934592 \
    --listen-metrics-urls="http://127.0.0.1:$((etcd_port + 2))"
  proc_wait_for etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"
}

start_apiserver() {
  local audit_policy=$dir/audit-policy.yaml
  # Mutating requests only: e2e tests count writes per node from this log (idempotence checks),
  # the scale benchmark the writes and request bytes of the implementation under test (service
  # accounts outside kube-system, whose bodies are logged; e2e/src/audit.rs reads them).
  cat >"$audit_policy" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Request
  userGroups: ["system:serviceaccounts"]
- level: Metadata
EOF
  start kube-apiserver kube-apiserver \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address="$node_bridge_ip" --secure-port="$apiserver_port" \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --kubelet-client-certificate="$dir/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$dir/pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$dir/pki/sa.pub" \
    --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --endpoint-reconciler-type=lease \
    --allow-privileged=true \
    --audit-policy-file="$audit_policy" --audit-log-path="$dir/logs/audit.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=1
  proc_wait_for kube-apiserver 120 admin_curl "https://127.0.0.1:$apiserver_port/readyz"
}

start_controllers() {
  local kc=$dir/admin.kubeconfig
  start kube-controller-manager kube-controller-manager \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$kcm_port" --leader-elect=false \
    --use-service-account-credentials=true \
    --root-ca-file="$dir/pki/ca.crt" --service-account-private-key-file="$dir/pki/sa.key" \
    --controllers="$kcm_controllers" \
    ${node_monitor_grace:+--node-monitor-grace-period="$node_monitor_grace"} \
    ${kcm_api_qps:+--kube-api-qps="$kcm_api_qps" --kube-api-burst="$((kcm_api_qps * 2))"}
  start kube-scheduler kube-scheduler \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$scheduler_port" --leader-elect=false
  proc_wait_for kube-controller-manager 60 curl -skf "https://127.0.0.1:$kcm_port/healthz"
  proc_wait_for kube-scheduler 60 curl -skf "https://127.0.0.1:$scheduler_port/healthz"
}

start_kwok() {
  "$bin/kwok" default-stages >"$dir/kwok-stages.yaml"
  start kwok kwok --kubeconfig="$dir/admin.kubeconfig" --config="$dir/kwok-stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --server-address="127.0.0.1:$kwok_port" --node-ip=127.0.0.1 --node-lease-duration-seconds="$kwok_lease_seconds"
  proc_wait_for kwok 60 curl -sf "http://127.0.0.1:$kwok_port/healthz"
}

# A KWOK-managed node the way KWOK's examples make them: annotation, `type=kwok` label, and a
# taint that keeps ordinary pods off. Extra labels (e.g. a pool label) come as key=value.
add_node() { # <name> [key=value ...]
  local name=$1 label
  shift
  {
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
EOF
    for label in "$@"; do
      printf '    %s: "%s"\n' "${label%%=*}" "${label#*=}"
    done
    cat <<EOF
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
EOF
  } | k apply -f - >/dev/null
}

node_ready() {
  k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

smoke_node() {
  add_node "$smoke_node"
  proc_wait_for "KWOK node $smoke_node" 60 node_ready "$smoke_node"
}

up() {
  build
  local start=$SECONDS
  mkdir -p "$dir"
  pki
  kubeconfig
  start_etcd
  start_apiserver
  start_controllers
  start_kwok
  # The serviceaccount controller creates `default` in each namespace; pods need it.
  proc_wait_for "default ServiceAccount" 60 k get serviceaccount default -n default
  smoke_node
  log "control plane ready in $((SECONDS - start))s (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)"
  env_line
}

down() {
  local i stopping=()
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do stopping+=("${components[i]}"); done
  proc_stop "${stopping[@]}"
  # The cluster is throwaway: the next `up` starts from an empty etcd.
  rm -rf "$dir/etcd"
  log "stopped"
}

env_line() { echo "export KUBECONFIG=$dir/admin.kubeconfig"; }

status() {
  local c
  for c in "${components[@]}"; do
    if proc_running "$c"; then echo "$c: running (pid $(proc_pid "$c"))"; else echo "$c: stopped"; fi
  done
}

case ${1:-} in
  build) build ;;
  up) up ;;
  down) down ;;
  env) env_line ;;
  status) status ;;
  add-node)
    [[ $# -ge 2 ]] || die "usage: $0 add-node NAME [key=value ...]"
    shift
    add_node "$@"
    proc_wait_for "KWOK node $1" 60 node_ready "$1"
    ;;
  cert)
    [[ $# -ge 3 ]] || die "usage: $0 cert NAME SUBJECT [SAN]"
    [[ -f $dir/pki/ca.key ]] || die "no cluster CA in $dir/pki: run $0 up first"
    [[ -f $dir/pki/$2.crt ]] || issue_cert "$2" "$3" "${4:-}"
    echo "$dir/pki/$2"
    ;;
  *) echo "usage: $0 {build|up|down|env|status|add-node|cert}" >&2; exit 2 ;;
esac
