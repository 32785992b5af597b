#!/usr/bin/env bash
# Kueue (sigs.k8s.io/kueue, built from the Go module proxy at the version pinned below) on this
# machine against the cluster in KUBECONFIG, installed as its release installs it, from its own
# module: its CRDs, its ClusterRole bound to its ServiceAccount (Kueue runs with a bound token of
# that account), and its webhooks for its own kinds and batch/v1 Jobs, served on 127.0.0.1 with a
# certificate made here. Everything stays on loopback. Needs root (see start: a mount namespace).
#
#   hack/kueue.sh start   build Kueue if needed (the first build takes 6-10 minutes on 2 cores),
#                         install it, start it, wait until it is ready and its webhooks answer
#   hack/kueue.sh stop    stop it and remove its webhook configurations (a webhook nothing
#                         serves would refuse every Job)
#
# Kueue's state, logs and pid file go to $FAKEGPU_CLUSTER_DIR (default .cache/cluster).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
kubectl=${FAKEGPU_BIN_DIR:-$repo/target/hack-bin}/kubectl
# shellcheck source=hack/lib/proc.sh
source "$repo/hack/lib/proc.sh"
# shellcheck source=hack/lib/kubeconfig.sh
source "$repo/hack/lib/kubeconfig.sh"
proc_run_dir=$dir/run
proc_log_dir=$dir/logs

version=v0.17.0
bin=$repo/target/hack-bin/kueue-$version
state=$dir/kueue
namespace=kueue-system
account=kueue-controller-manager
webhook_port=${FAKEGPU_KUEUE_WEBHOOK_PORT:-19443}
health_addr=${FAKEGPU_KUEUE_HEALTH_ADDR:-127.0.0.1:18081}
metrics_addr=${FAKEGPU_KUEUE_METRICS_ADDR:-127.0.0.1:18082}
webhooks=(kueue-mutating-webhook-configuration kueue-validating-webhook-configuration)

log() { printf '[kueue] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
k() { "$kubectl" "$@"; }

build() {
  [[ -x $bin ]] && return
  log "building Kueue $version from the module proxy (the first build takes 6-10 minutes on 2 cores)"
  local gobin
  gobin=$(mktemp -d)
  GOBIN=$gobin go install "sigs.k8s.io/kueue/cmd/kueue@$version"
  mkdir -p "$(dirname "$bin")"
  mv "$gobin/kueue" "$bin"
  rm -rf "$gobin"
}

# The module's own tree: CRDs, RBAC and webhook manifests of the pinned release.
module_dir() {
  go mod download -json "sigs.k8s.io/kueue@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'
}

install() {
  [[ -n ${KUBECONFIG:-} ]] || die "KUBECONFIG is not set (eval \"\$(hack/cluster.sh env)\")"
  local module
  module=$(module_dir)
  mkdir -p "$state/rbac" "$state/certs"
  k apply --server-side --field-manager=kueue-install -f "$module/config/components/crd/bases" >/dev/null
  k wait --for=condition=Established --timeout=60s \
    crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io crd/workloads.kueue.x-k8s.io \
    crd/resourceflavors.kueue.x-k8s.io crd/workloadpriorityclasses.kueue.x-k8s.io >/dev/null
  # The release's names: namespace kueue-system, prefix kueue-.
  local rbac=(role role_binding service_account manager_secrets_role manager_secrets_role_binding)
  local file
  for file in "${rbac[@]}"; do cp "$module/config/components/rbac/$file.yaml" "$state/rbac/"; done
  chmod u+w "$state"/rbac/*.yaml
  cat >"$state/rbac/kustomization.yaml" <<EOF
namespace: $namespace
namePrefix: kueue-
resources: [$(printf '%s.yaml, ' "${rbac[@]}" | sed 's/, $//')]
EOF
  k create namespace "$namespace" --dry-run=client -o yaml | k apply --server-side --field-manager=kueue-install -f - >/dev/null
  k apply --server-side --field-manager=kueue-install -k "$state/rbac" >/dev/null
  certificate
  webhook_configurations "$module"
}

# A CA and a serving certificate for 127.0.0.1, made here, for the webhooks.
certificate() {
  local certs=$state/certs
  [[ -f $certs/tls.crt ]] && return
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=fakegpu-kueue-webhook-ca \
    -keyout "$certs/ca.key" -out "$certs/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
    -keyout "$certs/tls.key" -out "$certs/tls.csr" 2>/dev/null
  openssl x509 -req -in "$certs/tls.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" -CAcreateserial \
    -days 30 -extfile <(printf 'subjectAltName=IP:127.0.0.1\n') -out "$certs/tls.crt" 2>/dev/null
}

# Kueue's webhook configurations for its own kinds and batch/v1 Jobs (the frameworks it runs
# here), pointing at 127.0.0.1 instead of its Service, trusting the CA made here.
webhook_configurations() { # <module dir>
  python3 - "$1/config/components/webhook/manifests.yaml" "$webhook_port" "$state/certs/ca.crt" <<'EOF' |
import base64, json, sys, yaml
manifests, port, ca = sys.argv[1], sys.argv[2], sys.argv[3]
bundle = base64.b64encode(open(ca, "rb").read()).decode()
served = {"kueue.x-k8s.io", "batch"}
items = []
for doc in yaml.safe_load_all(open(manifests)):
    if not doc:
        continue
    kept = [w for w in doc["webhooks"]
            if all(set(r["apiGroups"]) <= served for r in w["rules"])]
    for webhook in kept:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
    doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
    doc["webhooks"] = kept
    items.append(doc)
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
EOF
    k apply --server-side --force-conflicts --field-manager=kueue-install -f - >/dev/null
}

config() {
  cat >"$state/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $namespace
health:
  healthProbeBindAddress: $health_addr
metrics:
  bindAddress: $metrics_addr
webhook:
  host: 127.0.0.1
  port: $webhook_port
  certDir: $state/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: [batch/job]
featureGates:
  # An aggregated API server on 0.0.0.0:8082 otherwise; not needed here.
  VisibilityOnDemand: false
  # Quota for GPUs claimed through DRA (alpha in this release).
  DynamicResourceAllocation: true
resources:
  # A claim of NVIDIA's DeviceClass (fakegpu's DRA pools) counts as that many nvidia.com/gpu,
  # the resource the queues' quota names for device-plugin GPUs.
  deviceClassMappings:
  - name: nvidia.com/gpu
    deviceClassNames: [gpu.nvidia.com]
EOF
}


start() {
  build
  install
  config
  proc_running kueue && proc_stop kueue
  local kc
  kc=$(service_account_kubeconfig_to "$kubectl" "$namespace" "$account" "$state/$account.kubeconfig")
  # Kueue reads its metrics server's certificate from a fixed path, /etc/kueue/metrics/certs,
  # unless it manages its certificates itself (made for its Service's DNS name, which loopback
  # is not). It runs in a mount namespace of its own whose /etc is the host's with that path
  # added (an overlay): the host's /etc stays as it was.
  rm -rf "$state/etc"
  mkdir -p "$state/etc/upper/kueue/metrics" "$state/etc/work"
  cp -r "$state/certs" "$state/etc/upper/kueue/metrics/certs"
  # shellcheck disable=SC2016 # expanded by the inner shell
  proc_start kueue unshare --mount --propagation private sh -c \
    'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc && shift && exec "$@"' \
    sh "$state/etc" env KUBECONFIG="$kc" "$bin" --config="$state/config.yaml" --zap-log-level=info
  proc_wait_for kueue 120 curl -sf "http://$health_addr/readyz"
  proc_wait_for kueue 60 curl -s --cacert "$state/certs/ca.crt" -o /dev/null "https://127.0.0.1:$webhook_port/"
  log "Kueue $version running as $namespace/$account (log: $proc_log_dir/kueue.log)"
}

stop() {
  if proc_running kueue; then proc_stop kueue; fi
  if [[ -n ${KUBECONFIG:-} ]]; then
    k delete mutatingwebhookconfiguration "${webhooks[0]}" --ignore-not-found >/dev/null
    k delete validatingwebhookconfiguration "${webhooks[1]}" --ignore-not-found >/dev/null
  fi
  log "stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 {start|stop}" >&2; exit 2 ;;
esac
