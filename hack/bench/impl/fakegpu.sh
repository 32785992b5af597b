#!/usr/bin/env bash
# fakegpu as the scale benchmark drives an implementation (see e2e/src/bin/scale.rs): the
# operator, release build, run on the host as the bundle's ServiceAccount (hack/operator.sh).
#
#   fakegpu.sh start          install the bundle, start the operator
#   fakegpu.sh pools LAYOUT   one GpuNodePool per line of LAYOUT (pool, gpus, profile, product,
#                             memory_mib, dra), selecting the nodes by the reference's pool label
#   fakegpu.sh restart        restart the operator (a full resync)
#   fakegpu.sh stop           stop it
#   fakegpu.sh pids           the operator's pid
#
# An adapter for another implementation answers the same commands: hack/bench/scale.sh
# --compare ADAPTER runs it beside fakegpu.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export FAKEGPU_OPERATOR_BIN=${FAKEGPU_OPERATOR_BIN:-$repo/target/release/fakegpu-operator}
kubectl=${FAKEGPU_BIN_DIR:-$repo/target/hack-bin}/kubectl
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}

pools() { # <layout>
  local pool gpus profile product memory dra
  while IFS=$'\t' read -r pool gpus profile product memory dra; do
    [[ $pool == \#* || -z $pool ]] && continue
    cat <<YAML
---
apiVersion: fakegpu.dev/v1alpha1
kind: GpuNodePool
metadata:
  name: $pool
spec:
  gpu: {profile: $profile, count: $gpus}
  interfaces: {devicePlugin: true, dra: $dra}
YAML
  done <"$1"
}

case ${1:-} in
start) "$repo/hack/operator.sh" install && "$repo/hack/operator.sh" restart ;;
pools) pools "$2" | "$kubectl" create -f - >/dev/null ;;
restart | stop) "$repo/hack/operator.sh" "$1" ;;
# The pid file names hack/operator.sh's supervisor (it restarts the operator as a kubelet
# would); the operator is its child.
pids) pgrep -P "$(cat "$dir/run/operator.pid")" ;;
*)
  echo "usage: $0 start|pools LAYOUT|restart|stop|pids" >&2
  exit 2
  ;;
esac
