#!/usr/bin/env bash
# Runs fakegpu-operator on this machine against the cluster in KUBECONFIG (admin), the way the
# install bundle would run it in the cluster: with the bundle's ServiceAccount and its RBAC.
# (The local control plane has no real node to run the operator's image on.)
#
#   hack/operator.sh install   kubectl apply -k config/ (namespace, CRDs, RBAC, Deployment)
#   hack/operator.sh start     install, build, start in the background with a ServiceAccount token,
#                              started again whenever it exits (as a Deployment's pod would be)
#   hack/operator.sh restart   stop and start again with the binary already built (a full resync)
#   hack/operator.sh stop      stop the operator that `start` started
#   hack/operator.sh kubeconfig ACCOUNT  install, then print the path of a kubeconfig for one
#                                        of the bundle's ServiceAccounts (the tests run the
#                                        node agent and the exporter with theirs)
#
# Logs and the pid file go to $FAKEGPU_CLUSTER_DIR (default .cache/cluster). The operator serves
# /metrics, /healthz and /readyz on $FAKEGPU_HTTP_ADDR (default 127.0.0.1:18080).
# FAKEGPU_OPERATOR_INSTANCE (default `operator`) names the pid and log files, so that a second
# replica can run beside the first (another FAKEGPU_HTTP_ADDR too); `start`/`restart` wait
# until the replica leads unless FAKEGPU_WAIT_FOR_LEADER=false (a replica meant to stand by).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
kubectl=${FAKEGPU_BIN_DIR:-$repo/target/hack-bin}/kubectl
namespace=fakegpu-system
account=fakegpu-operator
instance=${FAKEGPU_OPERATOR_INSTANCE:-operator}
# shellcheck source=hack/lib/proc.sh
source "$repo/hack/lib/proc.sh"
# shellcheck source=hack/lib/kubeconfig.sh
source "$repo/hack/lib/kubeconfig.sh"
proc_run_dir=$dir/run
proc_log_dir=$dir/logs
http_addr=${FAKEGPU_HTTP_ADDR:-127.0.0.1:18080}
wait_for_leader=${FAKEGPU_WAIT_FOR_LEADER:-true}
# The binary `restart` runs (the scale benchmark points it at a release build).
binary=${FAKEGPU_OPERATOR_BIN:-$repo/target/debug/fakegpu-operator}

log() { printf '[operator] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

install() {
  [[ -n ${KUBECONFIG:-} ]] || die "KUBECONFIG is not set (eval \"\$(hack/cluster.sh env)\")"
  "$kubectl" apply --server-side --field-manager=fakegpu-install -k "$repo/config" >/dev/null
  "$kubectl" wait --for=condition=Established crd/gpunodepools.fakegpu.dev crd/computedomains.resource.nvidia.com --timeout=60s >/dev/null
}

# A kubeconfig that authenticates as a ServiceAccount of the bundle (default: the operator's)
# with a bound token.
service_account_kubeconfig() {
  local account=${1:-$account}
  service_account_kubeconfig_to "$kubectl" "$namespace" "$account" "$dir/$account.kubeconfig"
}

stop() {
  if proc_running "$instance"; then
    proc_stop "$instance"
    log "stopped"
  fi
  rm -f "$proc_run_dir/$instance.pid"
}

start() {
  install
  [[ -x $binary ]] || log "building fakegpu-operator (cargo; the first build takes 3-6 minutes on 2 cores)"
  (cd "$repo" && cargo build --quiet -p fakegpu-operator)
  launch
}

launch() {
  [[ -x $binary ]] || die "$binary is not built yet: run $0 start"
  stop
  local kc logfile=$proc_log_dir/$instance.log
  kc=$(service_account_kubeconfig)
  proc_start "$instance" "$0" supervise env KUBECONFIG="$kc" FAKEGPU_NAMESPACE="$namespace" \
    FAKEGPU_HTTP_ADDR="$http_addr" RUST_LOG="${RUST_LOG:-info,kube=warn}" NO_COLOR=1 \
    FAKEGPU_IDENTITY="$instance-$$" "$binary"
  for _ in $(seq 1 300); do
    if curl -sf "http://$http_addr/readyz" >/dev/null 2>&1 &&
      { [[ $wait_for_leader != true ]] ||
        curl -sf "http://$http_addr/metrics" | grep -q '^fakegpu_operator_leader 1'; }; then
      log "$instance running as $namespace/$account, http://$http_addr/metrics (log: $logfile)"
      return
    fi
    proc_running "$instance" || { tail -n 5 "$logfile" >&2; die "operator exited"; }
    sleep 0.2
  done
  die "operator did not become ready; see $logfile"
}

# Runs <command> again whenever it exits, as the kubelet restarts a Deployment's container (a
# replica that cannot renew its lease exits, for one), until SIGTERM, which it passes on.
supervise() { # <command...>
  local child="" status
  trap 'if [[ -n $child ]]; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi; exit 0' TERM INT
  while true; do
    "$@" &
    child=$!
    if wait "$child"; then status=0; else status=$?; fi
    log "$instance exited with status $status; starting it again in 1 s"
    sleep 1
  done
}

case ${1:-} in
  install) install ;;
  start) start ;;
  restart) launch ;;
  stop) stop ;;
  supervise) shift; supervise "$@" ;;
  kubeconfig) install && service_account_kubeconfig "${2:?which ServiceAccount}" ;;
  *) echo "usage: $0 {install|start|restart|stop|kubeconfig ACCOUNT}" >&2; exit 2 ;;
esac
