#!/usr/bin/env bash
# Scale benchmark: for each node count, a fresh local control plane (own directory and ports),
# the implementation under test started (fakegpu: the operator built with --release, run as its
# ServiceAccount), and the driver (e2e/src/bin/scale.rs) creating KWOK nodes, having the
# implementation set up the pools and measuring. Prints a table.
#
#   hack/bench/scale.sh [NODES ...]          default: 100 1000
#   FAKEGPU_BENCH_POOLS=4 FAKEGPU_BENCH_PODS=500 hack/bench/scale.sh 5000
#   FAKEGPU_BENCH_PROFILE_SECS=40 hack/bench/scale.sh 10000   # + kube-apiserver CPU profile
#   hack/bench/scale.sh --compare ADAPTER [NODES ...]   # fakegpu, then ADAPTER's implementation,
#                                                       # on the same node counts
#   hack/bench/scale.sh --compare hack/bench/impl/fakegpu-replay.sh 10000
#                             # fakegpu, then its own per-node writes sent again by a client that
#                             # does nothing else: the floor under its convergence
#
# An adapter is an executable answering `start`, `pools LAYOUT`, `restart`, `stop`, `pids` for
# its implementation (hack/bench/impl/fakegpu.sh is fakegpu's; e2e/src/bin/scale.rs says what
# each must do). Its writes are counted in the API server's audit log (service accounts
# outside kube-system), so both implementations are measured the same way.
#
# An older fakegpu side by side: build it in a worktree (git worktree add /tmp/old <rev>; cargo
# build --release -p fakegpu-operator there) and give it an adapter named fakegpu-<rev>.sh (the
# driver holds any fakegpu-* to fakegpu's convergence check) that exports
# FAKEGPU_OPERATOR_BIN=/tmp/old/target/release/fakegpu-operator and
# FAKEGPU_BIN_DIR=<this checkout>/target/hack-bin, then runs
# /tmp/old/hack/bench/impl/fakegpu.sh "$@"; then
#   hack/bench/scale.sh --compare /tmp/fakegpu-<rev>.sh 10000
#
# With FAKEGPU_BENCH_PROFILE_SECS, kube-apiserver's CPU is profiled (its /debug/pprof, as
# admin) for that many seconds from the moment the pools are applied; the profile lands in
# .cache/bench/apiserver-<impl>-<nodes>.pprof (`go tool pprof -top` it; the summary is printed).
#
# Not a test: nothing is asserted. Results land in .cache/bench/results.md as well.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
implementations=("$repo/hack/bench/impl/fakegpu.sh")
if [[ ${1:-} == --compare ]]; then
  [[ -x ${2:-} ]] || { echo "--compare needs an executable adapter" >&2; exit 2; }
  implementations+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")")
  shift 2
fi
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(100 1000)
pools=${FAKEGPU_BENCH_POOLS:-4}
pods=${FAKEGPU_BENCH_PODS:-500}

# shellcheck source=hack/lib/bench-cluster.sh
source "$repo/hack/lib/bench-cluster.sh"
# A cluster whose nodes stay schedulable (see hack/cluster.sh): leases KWOK can renew at 10 000
# nodes (one every 5 minutes, 33 a second) and a node lifecycle controller that waits for them;
# with kubelets' 40 s most nodes went NotReady and were tainted during every run. New nodes'
# not-ready taints taken off at 200 requests a second, not 20, and no TTL controller (its
# annotation is for kubelets' caches; it rewrote 900-1 200 nodes a minute for whole runs).
export FAKEGPU_KWOK_LEASE_SECONDS=${FAKEGPU_KWOK_LEASE_SECONDS:-1200}
export FAKEGPU_NODE_MONITOR_GRACE=${FAKEGPU_NODE_MONITOR_GRACE:-10m}
export FAKEGPU_KCM_API_QPS=${FAKEGPU_KCM_API_QPS:-200}
export FAKEGPU_KCM_CONTROLLERS=${FAKEGPU_KCM_CONTROLLERS:-*,-ttl}
results=$repo/.cache/bench/results.md
mkdir -p "$(dirname "$results")"

# A profiler still waiting for "pools applied" (the driver failed first) goes too.
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  local implementation
  for implementation in "${implementations[@]}"; do
    "$implementation" stop >/dev/null 2>&1 || true
  done
  hack/cluster.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT

hack/cluster.sh build
cargo build --quiet --release -p fakegpu-operator -p fakegpu-e2e --bin fakegpu-operator --bin scale --bin replay

header="| implementation | nodes | pools | nodes up s (created, KWOK-initialized) | converge s | implementation CPU s | implementation peak RSS MiB | API server CPU ms/node | API server cores (idle, converging) | first-pass writes/node | first-pass request bytes/node | resync writes | GPU pods/s | GPU pods/s (implementation stopped) | plain pods/s (stopped) |"
{
  echo "$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: hack/bench/scale.sh ${sizes[*]} (pools=$pools pods=$pods; ${implementations[*]##*/})"
  echo
  echo "$header"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$results"
profiles=()
# The driver logs "pools applied" when it applies the pools: convergence starts there.
profile_apiserver() { # <output>
  until grep -qs '^pools applied' "$FAKEGPU_CLUSTER_DIR/driver.log"; do sleep 0.2; done
  "$repo/target/hack-bin/kubectl" get --raw \
    "/debug/pprof/profile?seconds=$FAKEGPU_BENCH_PROFILE_SECS" >"$1"
}
for n in "${sizes[@]}"; do
  for implementation in "${implementations[@]}"; do
    name=$(basename "${implementation%.*}")
    cleanup
    rm -rf "$FAKEGPU_CLUSTER_DIR"
    eval "$(hack/cluster.sh up)"
    # The bench cluster has no smoke node in the way: the driver counts only its own nodes.
    "$implementation" start
    echo "==> $name: $n nodes, $pools pools, $pods pods" >&2
    rm -f "$FAKEGPU_CLUSTER_DIR/driver.log"
    profile=$repo/.cache/bench/apiserver-$name-$n.pprof
    rm -f "$profile"
    if [[ -n ${FAKEGPU_BENCH_PROFILE_SECS:-} ]]; then
      profile_apiserver "$profile" &
    fi
    # Progress goes to driver.log (tail -f it); it is shown when the size is done.
    target/release/scale --impl "$implementation" --nodes "$n" --pools "$pools" --pods "$pods" \
      2>"$FAKEGPU_CLUSTER_DIR/driver.log" | tee "$FAKEGPU_CLUSTER_DIR/row.txt" >&2
    cat "$FAKEGPU_CLUSTER_DIR/driver.log" >&2
    # The next size starts from a fresh cluster directory: keep what this run logged.
    mkdir -p "$repo/.cache/bench/logs"
    cp "$FAKEGPU_CLUSTER_DIR/driver.log" "$repo/.cache/bench/logs/driver-$name-$n.log"
    cp "$FAKEGPU_CLUSTER_DIR/logs/operator.log" "$repo/.cache/bench/logs/operator-$name-$n.log" 2>/dev/null || true
    cp "$FAKEGPU_CLUSTER_DIR/logs/replay.log" "$repo/.cache/bench/logs/replay-$n.log" 2>/dev/null || true
    head -n 1 "$FAKEGPU_CLUSTER_DIR/row.txt" >>"$results"
    # fakegpu's per-node writes, for hack/bench/impl/fakegpu-replay.sh to send again on this size.
    if [[ $name == fakegpu ]]; then
      export FAKEGPU_BENCH_WRITES=$repo/.cache/bench/writes-$n-$pools.jsonl
      target/release/replay capture "$FAKEGPU_BENCH_WRITES" "$FAKEGPU_CLUSTER_DIR"/logs/audit*.log
    fi
    profiles+=("$name, $n nodes: $(grep -o 'CPU seconds during convergence.*' "$FAKEGPU_CLUSTER_DIR/driver.log" || true); $(grep -o 'per-node writes done [0-9.]* s' "$FAKEGPU_CLUSTER_DIR/driver.log" || true)")
    wait
    if [[ -s $profile ]]; then
      echo "==> kube-apiserver CPU profile, $name, $n nodes ($profile)" >&2
      go tool pprof -top -cum -nodecount=40 "$profile" >&2 2>/dev/null || true
    fi
  done
done
{
  echo
  for line in "${profiles[@]}"; do echo "- $line"; done
} >>"$results"
echo
cat "$results"
