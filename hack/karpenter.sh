#!/usr/bin/env bash
# Karpenter's KWOK provider (sigs.k8s.io/karpenter/kwok, the release hack/karpenter/go.mod pins,
# built from the Go module proxy with the Go toolchain its go.mod asks for) on this machine
# against the cluster in KUBECONFIG, installed as its chart installs it: its CRDs, its
# ServiceAccount, the chart's ClusterRoles and Roles bound to it (Karpenter runs with a bound
# token of that account), and instance types with GPUs (hack/karpenter/instance-types.json).
# The nodes it launches carry KWOK's annotation, so the cluster's KWOK runs them.
#
#   hack/karpenter.sh start   build Karpenter if needed (the first build takes 5-10 minutes on
#                             2 cores), install it, start it, wait until it is ready
#   hack/karpenter.sh stop    stop it; the NodePools and nodes it made are the caller's to delete
#                             first (their finalizers need Karpenter)
#
# Karpenter binds its metrics and health ports on every interface (it takes ports, not
# addresses); nothing else listens, and it talks to the API server on loopback only.
# State, logs and pid file go to $FAKEGPU_CLUSTER_DIR (default .cache/cluster).
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

module=$repo/hack/karpenter
# Karpenter's go.mod asks for a newer Go than Debian's; the module proxy serves that toolchain.
export GOTOOLCHAIN=go1.27.3
state=$dir/karpenter
namespace=karpenter
account=karpenter
metrics_port=${FAKEGPU_KARPENTER_METRICS_PORT:-18180}
health_port=${FAKEGPU_KARPENTER_HEALTH_PORT:-18181}

log() { printf '[karpenter] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
k() { "$kubectl" "$@"; }

# The pinned release and its binary (asked of the go command, which fetches the toolchain on a
# new machine: only where Karpenter is built or started, not on `stop`).
version=
bin=
resolve() {
  version=$(go -C "$module" list -m -f '{{.Version}}' sigs.k8s.io/karpenter)
  bin=$repo/target/hack-bin/karpenter-kwok-$version
}

build() {
  [[ -x $bin ]] && return
  log "building Karpenter's KWOK provider $version from the module proxy (the first build takes 5-10 minutes on 2 cores)"
  local start=$SECONDS
  mkdir -p "$(dirname "$bin")"
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$bin.tmp" sigs.k8s.io/karpenter/kwok)
  mv "$bin.tmp" "$bin"
  log "built in $((SECONDS - start))s"
}

# The release's own tree: CRDs and the chart's RBAC templates.
module_dir() { go -C "$module" list -m -f '{{.Dir}}' sigs.k8s.io/karpenter; }

# The chart's RBAC with its values as the chart's defaults give them (name and ServiceAccount
# `karpenter`, the release namespace below), no annotations, no extra rules. The templates are
# YAML but for those few expressions, which this replaces or drops.
rbac() { # <module dir>
  python3 - "$namespace" "$1"/kwok/charts/templates/{clusterrole,clusterrole-kwok,role,rolebinding,serviceaccount}.yaml <<'EOF'
import json, re, sys, yaml
namespace, paths = sys.argv[1], sys.argv[2:]
items = []
for path in paths:
    lines, skipping = [], 0
    for line in open(path):
        directive = line.strip()
        if re.fullmatch(r"\{\{-? *(with|if) .*\}\}", directive):
            # Blocks on values the defaults leave empty (annotations, extra rules); the
            # ServiceAccount's `if .Values.serviceAccount.create` is true by default.
            if "serviceAccount.create" not in directive:
                skipping += 1
            continue
        if re.fullmatch(r"\{\{-? *end *-?\}\}", directive):
            skipping = max(skipping - 1, 0)
            continue
        if skipping or re.fullmatch(r"\{\{-? *(include|toYaml) .*\}\}", directive):
            continue
        line = re.sub(r'\{\{ *(include|template) "karpenter\.(fullname|serviceAccountName)" \. *\}\}', "karpenter", line)
        line = line.replace("{{ .Release.Namespace }}", namespace)
        if "{{" in line:
            sys.exit(f"{path}: a template expression this script does not know: {line.strip()}")
        lines.append(line)
    items += [doc for doc in yaml.safe_load_all("".join(lines)) if doc]
for item in items:
    if item["metadata"].get("labels") is None:
        item["metadata"].pop("labels", None)
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
EOF
}

install() {
  [[ -n ${KUBECONFIG:-} ]] || die "KUBECONFIG is not set (eval \"\$(hack/cluster.sh env)\")"
  local tree
  tree=$(module_dir)
  mkdir -p "$state"
  k apply --server-side --field-manager=karpenter-install -f "$tree/kwok/charts/crds" -f "$tree/kwok/apis/crds" >/dev/null
  k wait --for=condition=Established --timeout=60s crd/nodepools.karpenter.sh crd/nodeclaims.karpenter.sh \
    crd/nodeoverlays.karpenter.sh crd/kwoknodeclasses.karpenter.kwok.sh >/dev/null
  k create namespace "$namespace" --dry-run=client -o yaml | k apply --server-side --field-manager=karpenter-install -f - >/dev/null
  rbac "$tree" >"$state/rbac.json"
  k apply --server-side --field-manager=karpenter-install -f "$state/rbac.json" >/dev/null
}

start() {
  resolve
  build
  install
  proc_running karpenter && proc_stop karpenter
  local kc
  kc=$(service_account_kubeconfig_to "$kubectl" "$namespace" "$account" "$state/$account.kubeconfig")
  # The chart's environment, with its defaults; no leader election (one replica, no Lease to
  # leave behind); consolidation without waiting for a batch window longer than a test's.
  proc_start karpenter env KUBECONFIG="$kc" SYSTEM_NAMESPACE="$namespace" KARPENTER_SERVICE=karpenter \
    KUBERNETES_MIN_VERSION=1.19.0-0 METRICS_PORT="$metrics_port" HEALTH_PROBE_PORT="$health_port" \
    DISABLE_LEADER_ELECTION=true LOG_LEVEL=info BATCH_MAX_DURATION=10s BATCH_IDLE_DURATION=1s \
    INSTANCE_TYPES_FILE_PATH="$module/instance-types.json" "$bin"
  proc_wait_for karpenter 120 curl -sf "http://127.0.0.1:$health_port/readyz"
  log "Karpenter $version (KWOK provider) running as $namespace/$account (log: $proc_log_dir/karpenter.log)"
}

stop() {
  if proc_running karpenter; then proc_stop karpenter; fi
  log "stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 {start|stop}" >&2; exit 2 ;;
esac
