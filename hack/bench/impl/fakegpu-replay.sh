#!/usr/bin/env bash
# The floor under fakegpu's convergence, as hack/bench/scale.sh drives an implementation: the
# per-node writes of fakegpu's own first pass on the same nodes (topology ConfigMap and
# ResourceSlice creates, node status patches), captured from the API server's audit log of the
# fakegpu run just before (scale.sh writes $FAKEGPU_BENCH_WRITES), sent again by a client that
# does nothing else (e2e/src/bin/replay.rs): no watch, no reconcile, every body ready. What
# the cluster takes to absorb them bounds any implementation that publishes these objects.
#
#   hack/bench/scale.sh --compare hack/bench/impl/fakegpu-replay.sh 10000
#
#   fakegpu-replay.sh start          install the bundle (the operator's ServiceAccount and RBAC)
#   fakegpu-replay.sh pools LAYOUT   start the replay, as that ServiceAccount (LAYOUT must be
#                                    the captured run's: same nodes, same pools)
#   fakegpu-replay.sh restart        nothing: a replay sends each write once
#   fakegpu-replay.sh stop           stop it
#   fakegpu-replay.sh pids           its pid (it stays, idle, after the last write)
#
# Its name starts with `fakegpu-`, so the driver holds it to fakegpu's convergence check.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
# shellcheck source=hack/lib/proc.sh
source "$repo/hack/lib/proc.sh"
proc_run_dir=$dir/run
proc_log_dir=$dir/logs
die() { printf '[replay] error: %s\n' "$*" >&2; exit 1; }

case ${1:-} in
# The ServiceAccount's kubeconfig is made here, not when the clock runs.
start) "$repo/hack/operator.sh" kubeconfig fakegpu-operator >/dev/null ;;
pools)
  writes=${FAKEGPU_BENCH_WRITES:-}
  [[ -s $writes ]] || die "no captured writes in FAKEGPU_BENCH_WRITES (${writes:-unset}): hack/bench/scale.sh captures them from the fakegpu run before this one"
  proc_start replay env KUBECONFIG="$dir/fakegpu-operator.kubeconfig" \
    "$repo/target/release/replay" run "$writes"
  ;;
restart) ;;
stop) proc_stop replay ;;
pids) proc_pid replay ;;
*)
  echo "usage: $0 start|pools LAYOUT|restart|stop|pids" >&2
  exit 2
  ;;
esac
